"""Where servers run and how time is read: the one seam between a real host and the
simulator.

:func:`make_backend` is the only place that chooses between them (from ``--simulate``).
Everything else (controller, planner, health, gate) asks its backend and never branches
on which one it has:

- :class:`HostBackend`: each profile's own runtime (docker or local) running SGLang, the
  wall clock, the GPUs ``nvidia-smi`` names;
- :class:`SimulatedBackend`: the local runtime running :mod:`kctl.sim` in place of SGLang,
  bound to loopback, its state in the state dir's ``simulate/`` namespace, and time
  compressed by each profile's ``simulator.speedup``: rates and timings read back at
  real-time scale through :meth:`Backend.time_scale`.

Fleets too: :meth:`Backend.orchestrator` names Docker Swarm on a host and the simulated
orchestrator under ``--simulate``; :func:`kctl.fleet.drivers.fleet_driver` builds the
driver it names (the fleet package builds on this module, never the other way round).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any, Literal, Protocol

from kctl.launch import launch_spec
from kctl.profile.model import Profile
from kctl.runtime.base import LaunchSpec

#: the orchestrators a fleet runs on (:func:`kctl.fleet.drivers.fleet_driver`)
Orchestrator = Literal["swarm", "simulated"]


class Backend(Protocol):
    """What the controller needs to know about where servers run."""

    #: True for the simulator (``kctl plan``'s ``simulate``)
    simulated: bool

    def state_dir(self, root: Path) -> Path:
        """The directory of this backend's store, lock and logs under the state root."""

    def runtime_kind(self, requested: str) -> str:
        """The runtime that runs a server a profile (or record) asks to run on ``requested``."""

    def launch_spec(self, profile: Profile, deployment_id: str, image: str | None) -> LaunchSpec:
        """How to start ``profile`` as ``deployment_id``."""

    def time_scale(self, profile: Profile) -> float:
        """Real-time seconds per wall-clock second while ``profile`` runs (1 on a host)."""

    def identity(self) -> dict[str, Any]:
        """What a stored measurement must have been taken on to be comparable."""

    def note(self, profile: Profile | None) -> str | None:
        """Lines to print above a gate table, or None (:func:`noted` puts them there)."""

    def local_reason(self) -> str:
        """Why a profile of another runtime kind runs locally ("" when it does not)."""

    def orchestrator(self) -> Orchestrator:
        """The orchestrator a fleet runs on."""


def noted(backend: Backend, profile: Profile | None, table: str) -> str:
    """A gate table with the backend's note for ``profile`` above it, when it has one."""
    note = backend.note(profile)
    return f"{note}\n{table}" if note else table


def fingerprint(backend: Backend, gate_profile: Profile, measured: Profile) -> str:
    """What a stored measurement must match to be reused as a baseline: the gate workload
    (of ``gate_profile``), the model, the GPU, the host, and the measured profile's
    content."""
    gate = gate_profile.gate
    key = {
        "workload": {
            "contexts": list(gate.contexts),
            "output_tokens": gate.output_tokens,
            "warmup": gate.warmup,
            "concurrency": gate.concurrency,
            "seed": gate.seed,
            "correctness": [gate.correctness.prompts, gate.correctness.tokens],
        },
        "model": measured.server.model_path,
        "host": socket.gethostname(),
        "measured_profile": measured.content_hash,
        **backend.identity(),
    }
    blob = json.dumps(key, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def gpu_description() -> str:
    """``<n>x <name>`` of this host's GPUs, from nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return "no-nvidia-smi"
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown-gpu"
    names = [line.strip() for line in out.splitlines() if line.strip()]
    return f"{len(names)}x {names[0]}" if names else "unknown-gpu"


class HostBackend:
    """This host: each profile's runtime, real SGLang, wall-clock time."""

    simulated = False

    def state_dir(self, root: Path) -> Path:
        return root

    def runtime_kind(self, requested: str) -> str:
        return requested

    def launch_spec(self, profile: Profile, deployment_id: str, image: str | None) -> LaunchSpec:
        return launch_spec(profile, deployment_id, simulate=False, image=image)

    def time_scale(self, profile: Profile) -> float:
        return 1.0

    def identity(self) -> dict[str, Any]:
        return {"gpu": gpu_description(), "simulated": False}

    def note(self, profile: Profile | None) -> str | None:
        return None

    def local_reason(self) -> str:
        return ""

    def orchestrator(self) -> Orchestrator:
        return "swarm"


class SimulatedBackend:
    """The SGLang simulator on the local runtime, time compressed, in ``simulate/``."""

    simulated = True

    def state_dir(self, root: Path) -> Path:
        return root / "simulate"

    def runtime_kind(self, requested: str) -> str:
        return "local"

    def launch_spec(self, profile: Profile, deployment_id: str, image: str | None) -> LaunchSpec:
        spec = launch_spec(profile, deployment_id, simulate=True)
        # a simulated server never listens beyond loopback, whatever the profile binds
        argv = list(spec.argv)
        if "--host" in argv:
            argv[argv.index("--host") + 1] = "127.0.0.1"
        return dataclasses.replace(spec, argv=tuple(argv), host="127.0.0.1")

    def time_scale(self, profile: Profile) -> float:
        return float(profile.simulator.speedup)

    def identity(self) -> dict[str, Any]:
        return {"gpu": "simulated", "simulated": True}

    def note(self, profile: Profile | None) -> str | None:
        if profile is None:
            return "SIMULATED (rates and timings at real-time scale)"
        note = (
            f"SIMULATED (kctl.sim, time compressed {profile.simulator.speedup:g}x; "
            "rates and timings shown at real-time scale)"
        )
        if profile.server.kv_cache_dtype.startswith("fp8"):
            # the simulator's calibration holds bf16 measurements only (docs/simulator.md)
            note += (
                f"\nfp8 KV cache ({profile.server.kv_cache_dtype}): simulated at the bf16 "
                "calibration's rates, baseline and candidate alike (no fp8 measurement)"
            )
        return note

    def local_reason(self) -> str:
        return " (and --simulate runs locally)"

    def orchestrator(self) -> Orchestrator:
        return "simulated"


def make_backend(*, simulate: bool) -> Backend:
    """The backend for this command: the one place that decides on simulation."""
    return SimulatedBackend() if simulate else HostBackend()
