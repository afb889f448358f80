"""The simulator's own environment (``KCTL_SIM_*``) and the SGLang/kernel variables it
honours, read once at start into a frozen :class:`Settings`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

FAULTS = (
    "crash_at_start",
    "crash_while_loading",
    "never_ready",
    "fatal_log",
    "generate_error",
    "hang",
    "wrong_output",
    "kernel_declined",
    "low_acceptance",
)

DEFAULT_FATAL_LINE = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.00 GiB. GPU 0 has a total "
    "capacity of 94.97 GiB of which 1.21 GiB is free. Process has 93.74 GiB memory in use."
)
#: the SGLang version the shipped profiles pin; the simulator reports it as its own
DEFAULT_SGLANG_VERSION = "0.5.10"
#: env vars whose values /server_info reports, so tests can prove kctl passed them
ENV_OF_INTEREST = (
    "KDTREE_VERIFY",
    "CUDA_VISIBLE_DEVICES",
    "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION",
    "SGLANG_HEALTH_CHECK_TIMEOUT",
    "KCTL_SIM_SPEEDUP",
    "KCTL_SIM_LOAD_S",
    "KCTL_SIM_SLOWDOWN",
    "KCTL_SIM_FAULT",
    "KCTL_SIM_NOISE",
    "KCTL_SIM_SEED",
)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class SettingsError(ValueError):
    """An environment variable has a value the simulator cannot use."""


@dataclass(frozen=True)
class Settings:
    speedup: float = 1.0
    load_s: float = 330.0
    slowdown: float = 1.0
    faults: frozenset[str] = frozenset()
    fatal_line: str = DEFAULT_FATAL_LINE
    noise: float = 0.0
    seed: int = 0
    kdtree_verify: bool = False
    health_generation: bool = True
    health_check_timeout_s: float = 20.0
    sglang_version: str = DEFAULT_SGLANG_VERSION
    calibration_path: str | None = None
    env: tuple[tuple[str, str | None], ...] = ()

    def has(self, fault: str) -> bool:
        return fault in self.faults

    def compress(self, seconds: float) -> float:
        """Real seconds to wait for ``seconds`` of simulated time."""
        return seconds / self.speedup


def _float(env: Mapping[str, str], name: str, default: float, minimum: float) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}: must be a number (got {raw!r})") from None
    if not value >= minimum:  # also rejects NaN
        raise SettingsError(f"{name}: must be >= {minimum} (got {raw!r})")
    return value


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    low = raw.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise SettingsError(f"{name}: must be 1/0/true/false (got {raw!r})")


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    """Read the settings from ``env`` (default ``os.environ``); raise SettingsError with
    the variable's name on a bad value."""
    env = os.environ if env is None else env
    speedup = _float(env, "KCTL_SIM_SPEEDUP", 1.0, 1e-9)
    if speedup <= 0:
        raise SettingsError("KCTL_SIM_SPEEDUP: must be > 0")
    faults = frozenset(f.strip() for f in env.get("KCTL_SIM_FAULT", "").split(",") if f.strip())
    unknown = sorted(faults - set(FAULTS))
    if unknown:
        raise SettingsError(
            f"KCTL_SIM_FAULT: unknown fault(s) {', '.join(unknown)}; known: {', '.join(FAULTS)}"
        )
    seed_raw = env.get("KCTL_SIM_SEED", "0").strip() or "0"
    try:
        seed = int(seed_raw)
    except ValueError:
        raise SettingsError(f"KCTL_SIM_SEED: must be an integer (got {seed_raw!r})") from None
    return Settings(
        speedup=speedup,
        load_s=_float(env, "KCTL_SIM_LOAD_S", 330.0, 0.0),
        slowdown=_float(env, "KCTL_SIM_SLOWDOWN", 1.0, 1e-9),
        faults=faults,
        fatal_line=env.get("KCTL_SIM_FATAL_LINE") or DEFAULT_FATAL_LINE,
        noise=_float(env, "KCTL_SIM_NOISE", 0.0, 0.0),
        seed=seed,
        # the real startup hook turns on for exactly "1" (kdtree_mla._startup.enabled)
        kdtree_verify=env.get("KDTREE_VERIFY", "") == "1",
        health_generation=_bool(env, "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", True),
        health_check_timeout_s=_float(env, "SGLANG_HEALTH_CHECK_TIMEOUT", 20.0, 0.0),
        sglang_version=env.get("KCTL_SIM_SGLANG_VERSION") or DEFAULT_SGLANG_VERSION,
        calibration_path=env.get("KCTL_SIM_CALIBRATION") or None,
        env=tuple((name, env.get(name)) for name in ENV_OF_INTEREST),
    )
