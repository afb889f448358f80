"""Docker-side preflight: checked before anything is stopped, so a deploy that cannot
work fails in seconds with nothing changed (PreflightFailed / RuntimeUnavailable, exit 5).

Checks: the docker engine answers; the image's CUDA archs cover every GPU's compute
capability (read with ``nvidia-smi``, or given explicitly); the server port is free or
held by the deployment being replaced; every mounted host path exists.

The decisions are pure functions (:func:`archs_cover`, :func:`check_archs`,
:func:`check_mounts`) over values that :func:`docker_preflight` gathers; tests drive them
directly.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kctl.errors import KctlError, PreflightFailed
from kctl.profile.model import Profile, RuntimeSpec
from kctl.runtime.base import Instance

if TYPE_CHECKING:
    from kctl.runtime.base import Runtime

#: explicit override of the GPUs' compute capabilities, e.g. "12.0" or "12.0,12.0"
#: (hosts where nvidia-smi cannot run, or a build host without the serving GPUs)
ENV_GPU_CAPS = "KCTL_GPU_COMPUTE_CAP"

_ARCH = re.compile(r"^(\d+)\.(\d+)([af]?)(\+PTX)?$")
_CAP = re.compile(r"^(\d+)\.(\d+)$")

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class PreflightCheck:
    """One check that passed, for the deploy report: ``name`` and what was seen."""

    name: str
    detail: str


def _cap(text: str) -> tuple[int, int]:
    m = _CAP.match(text.strip())
    if not m:
        raise ValueError(f"not a compute capability: {text!r}")
    return int(m.group(1)), int(m.group(2))


def archs_cover(archs: Sequence[str], cap: str) -> bool:
    """Whether a binary built for ``archs`` (TORCH_CUDA_ARCH_LIST entries) runs on a GPU of
    compute capability ``cap``.

    CUDA's rules: SASS for ``M.m`` runs on ``M.n`` with n >= m (same major); the
    arch-specific ``M.ma``/``M.mf`` variants only on exactly ``M.m``; ``+PTX`` is JIT-compiled
    by the driver for any newer GPU.
    """
    major, minor = _cap(cap)
    for arch in archs:
        m = _ARCH.match(arch.strip())
        if not m:
            continue
        a_major, a_minor, variant, ptx = int(m.group(1)), int(m.group(2)), m.group(3), m.group(4)
        if ptx and (major, minor) >= (a_major, a_minor):
            return True
        if variant and (major, minor) == (a_major, a_minor):
            return True
        if not variant and major == a_major and minor >= a_minor:
            return True
    return False


def check_archs(archs: Sequence[str], caps: Sequence[str], *, where: str) -> list[str]:
    """Problems (empty when fine) for image archs against the GPUs' capabilities."""
    missing = sorted({c for c in caps if not archs_cover(archs, c)})
    if not missing:
        return []
    wanted = ";".join(sorted({c for c in caps}))
    return [
        f"{where}: the image is built for CUDA archs {';'.join(archs) or '(none)'} but the "
        f"GPUs have compute capability {', '.join(missing)}; set image.cuda_archs to "
        f'["{wanted}"] (a kernel without a matching arch fails with "no kernel image is '
        'available" only after the model has loaded)'
    ]


def gpu_compute_caps(
    gpus: str | tuple[int, ...], *, run: Runner = subprocess.run, timeout_s: float = 30.0
) -> list[str]:
    """The compute capability of each GPU the container will get, from ``nvidia-smi``.
    Raises PreflightFailed when it cannot be read (with the override as the way out)."""
    hint = f"install the NVIDIA driver, or state the capability explicitly: {ENV_GPU_CAPS}=12.0"
    if shutil.which("nvidia-smi") is None and run is subprocess.run:
        raise PreflightFailed(
            "cannot read the GPUs' compute capability: nvidia-smi not found", hint=hint
        )
    cmd = ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"]
    if gpus != "all":
        cmd.append("--id=" + ",".join(str(i) for i in gpus))
    try:
        done = run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PreflightFailed(f"nvidia-smi failed: {exc}", hint=hint) from exc
    if done.returncode != 0:
        msg = (done.stderr or done.stdout or "").strip().splitlines()
        raise PreflightFailed(
            f"nvidia-smi exited with {done.returncode}: {msg[-1] if msg else 'no output'}",
            hint=hint,
        )
    caps = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    for c in caps:
        try:
            _cap(c)
        except ValueError as exc:
            raise PreflightFailed(
                f"nvidia-smi printed {c!r}, not a compute capability", hint=hint
            ) from exc
    if not caps:
        raise PreflightFailed("nvidia-smi lists no GPU", hint=hint)
    return caps


def check_mounts(runtime: RuntimeSpec, *, where: str) -> list[str]:
    """Problems for host paths of ``runtime.volumes`` that do not exist."""
    return [
        f"{where}: runtime.volumes[{i}].host: {v.host} does not exist on this host; create "
        "it or fix the path (docker would create an empty root-owned directory instead)"
        for i, v in enumerate(runtime.volumes)
        if not Path(v.host).exists()
    ]


def check_port(
    port: int, holder: str | None, *, replacing: Instance | None, replacing_running: bool
) -> list[str]:
    """Problems when ``port`` is taken by anything but the deployment being replaced."""
    if holder is None:
        return []
    if replacing is not None and replacing_running and replacing.port in (port, 0):
        return []
    return [
        f"port {port} is taken by {holder}; stop it, or serve on a free port: --set "
        "server.port=PORT (the baseline too), or server.port in the profiles"
    ]


def docker_preflight(
    profile: Profile,
    *,
    runtime: Runtime,
    serving: tuple[Any, Instance] | Instance | None = None,
    gpu_caps: Sequence[str] | None = None,
    image_archs: Sequence[str] | None = None,
    run: Runner = subprocess.run,
) -> list[PreflightCheck]:
    """Every docker-side check for deploying ``profile`` while ``serving`` (the current
    deployment's instance, or ``(record, instance)``) runs. Collects all problems and
    raises one PreflightFailed listing them; RuntimeUnavailable when docker is down.

    ``gpu_caps`` overrides nvidia-smi (else env ``KCTL_GPU_COMPUTE_CAP``); ``image_archs``
    are the archs the image carries (default: the profile's ``image.cuda_archs``, which
    the build compiles for; a simulator image runs no kernel and is not checked).
    """
    where = profile.source or profile.name
    passed: list[PreflightCheck] = []
    problems: list[str] = []

    runtime.check_available()  # RuntimeUnavailable: nothing else can be checked without it
    passed.append(PreflightCheck("docker", "engine reachable"))

    instance = serving[1] if isinstance(serving, tuple) else serving
    replacing_running = False
    if instance is not None:
        try:
            replacing_running = runtime.state(instance).running
        except KctlError:
            replacing_running = False
    port = profile.server.port
    port_problems = check_port(
        port, runtime.port_holder(port), replacing=instance, replacing_running=replacing_running
    )
    problems += port_problems
    if not port_problems:
        passed.append(PreflightCheck("port", f"{port} free or held by the deployment replaced"))

    mount_problems = check_mounts(profile.runtime, where=where)
    problems += mount_problems
    if not mount_problems and profile.runtime.volumes:
        passed.append(PreflightCheck("mounts", f"{len(profile.runtime.volumes)} host paths exist"))

    gpus = profile.runtime.gpus
    if gpus == () or profile.image.install_simulator or profile.image.kernel_source is None:
        # no kctl kernel in the image: SGLang's own image carries its archs
        passed.append(PreflightCheck("gpu-arch", "not checked (no GPUs or no kctl kernel)"))
    else:
        archs = list(image_archs) if image_archs is not None else list(profile.image.cuda_archs)
        override = gpu_caps
        if override is None and os.environ.get(ENV_GPU_CAPS):
            override = [c.strip() for c in os.environ[ENV_GPU_CAPS].split(",") if c.strip()]
        try:
            caps = list(override) if override is not None else gpu_compute_caps(gpus, run=run)
            arch_problems = check_archs(archs, caps, where=where)
        except PreflightFailed as exc:
            arch_problems = [str(exc)]
        except ValueError as exc:
            arch_problems = [f"{ENV_GPU_CAPS}: {exc}"]
        problems += arch_problems
        if not arch_problems:
            passed.append(
                PreflightCheck("gpu-arch", f"archs {';'.join(archs)} cover GPUs {', '.join(caps)}")
            )

    if problems:
        head = problems[0] if len(problems) == 1 else f"{len(problems)} preflight problems"
        body = "" if len(problems) == 1 else "\n" + "\n".join(f"  {p}" for p in problems)
        raise PreflightFailed(head + body, hint="nothing was stopped or changed")
    return passed
