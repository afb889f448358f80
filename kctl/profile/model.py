"""The resolved profile: frozen dataclasses, the single source of truth for what a
deployment is. Loading and validation live in :mod:`kctl.profile.loader`; everything
else (launch argv, docker run spec, Dockerfile, gate plan) is derived from these values
by pure functions.

Defaults here are the documented defaults; ``profiles/reference.yaml`` comments every key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

VerifyKernel = Literal["kdtree", "none"]
RuntimeKind = Literal["docker", "local"]
OnInconclusive = Literal["revert", "promote"]


@dataclass(frozen=True)
class ImageSpec:
    """How the serving image is built (docker runtime only)."""

    base: str = "lmsysorg/sglang:v0.5.10-cu130"
    #: path of the kernel package source, relative to the repository root; None = no kernel
    kernel_source: str | None = None
    #: TORCH_CUDA_ARCH_LIST entries, e.g. ("12.0",) for RTX PRO 6000 Blackwell
    cuda_archs: tuple[str, ...] = ("12.0",)
    #: tests only: install the SGLang-compatible simulator as the `sglang` package, so the
    #: unchanged `python3 -m sglang.launch_server ...` command runs it inside the container
    install_simulator: bool = False


@dataclass(frozen=True)
class SpeculativeSpec:
    algorithm: str = "EAGLE3"
    draft_model_path: str | None = None
    num_steps: int = 3
    eagle_topk: int = 1
    num_draft_tokens: int = 4


@dataclass(frozen=True)
class ServerSpec:
    """The `python3 -m sglang.launch_server` invocation."""

    model_path: str = ""
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = 30000
    tp: int = 1
    attention_backend: str = "triton"
    cuda_graphs: bool = True
    cuda_graph_max_bs: int | None = None
    mem_fraction_static: float | None = None
    trust_remote_code: bool = True
    kv_cache_dtype: str = "auto"
    speculative: SpeculativeSpec | None = None
    #: which verify-attention path the profile expects to run: health checks the
    #: kernel's activation log line for "kdtree" and its absence for "none"
    verify_kernel: VerifyKernel = "none"
    extra_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)


@dataclass(frozen=True)
class VolumeSpec:
    host: str
    container: str
    read_only: bool = True


@dataclass(frozen=True)
class RuntimeSpec:
    kind: RuntimeKind = "docker"
    #: "all", or a tuple of device indices; () = no GPUs (tests)
    gpus: str | tuple[int, ...] = "all"
    shm_size: str = "32g"
    volumes: tuple[VolumeSpec, ...] = ()
    stop_timeout_s: float = 60.0
    #: how many stopped containers of earlier deployments to keep for fast rollback
    retain: int = 3


@dataclass(frozen=True)
class HealthSpec:
    deadline_s: float = 900.0
    poll_interval_s: float = 2.0
    request_timeout_s: float = 30.0
    #: require one real generation before calling the server healthy
    require_generation: bool = True
    #: extra regular expressions that end the wait at once when a log line matches
    fatal_patterns: tuple[str, ...] = ()


@dataclass(frozen=True)
class ObjectiveSpec:
    """Traffic-mix weighted objective: sum(weight * ratio) / sum(weight) >= min_ratio."""

    weights: tuple[tuple[int, float], ...]
    min_ratio: float = 1.0


@dataclass(frozen=True)
class PolicySpec:
    min_ratio: float = 1.0
    min_ratio_per_context: tuple[tuple[int, float], ...] = ()
    objective: ObjectiveSpec | None = None
    on_inconclusive: OnInconclusive = "revert"
    #: a stored baseline measurement older than this is measured again
    baseline_max_age_s: float = 7 * 24 * 3600.0
    #: extra repeats per context when the ratio's spread straddles a threshold
    max_extra_repeats: int = 4
    #: fraction of planned requests that must complete
    min_completed_fraction: float = 1.0
    #: stop measuring once a binding context is clearly below its threshold (FAIL): the
    #: contexts after it, the concurrency phase and the correctness probes are skipped
    stop_at_first_fail: bool = False

    def threshold(self, context: int) -> float:
        return dict(self.min_ratio_per_context).get(context, self.min_ratio)


@dataclass(frozen=True)
class CorrectnessSpec:
    prompts: int = 3
    tokens: int = 16
    #: how many prompts may differ from the baseline's recorded greedy output
    max_mismatched_prompts: int = 0


@dataclass(frozen=True)
class GateSpec:
    contexts: tuple[int, ...] = (5700, 23000, 91000)
    output_tokens: int = 128
    repeats: int = 3
    warmup: int = 1
    concurrency: int | None = None
    request_timeout_s: float = 600.0
    seed: int = 0
    policy: PolicySpec = field(default_factory=PolicySpec)
    correctness: CorrectnessSpec = field(default_factory=CorrectnessSpec)


@dataclass(frozen=True)
class SimulatorSpec:
    """Used only with ``--simulate``: how the SGLang-compatible simulator stands in."""

    #: time compression: load time and token latencies are divided by this
    speedup: float = 50.0
    #: simulated model load seconds before compression (330 s measured for Kimi K2.6)
    load_s: float = 330.0


@dataclass(frozen=True)
class Profile:
    name: str
    #: path of the file this profile was loaded from
    source: str
    description: str = ""
    #: file path of the known-good baseline profile; None when this profile is a baseline
    baseline: str | None = None
    image: ImageSpec = field(default_factory=ImageSpec)
    server: ServerSpec = field(default_factory=ServerSpec)
    runtime: RuntimeSpec = field(default_factory=RuntimeSpec)
    health: HealthSpec = field(default_factory=HealthSpec)
    gate: GateSpec = field(default_factory=GateSpec)
    simulator: SimulatorSpec = field(default_factory=SimulatorSpec)
    #: sha256 of the resolved content (source path and name excluded); stable across runs
    content_hash: str = ""
