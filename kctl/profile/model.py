"""The resolved profile: frozen pydantic dataclasses, the single definition of what a
deployment is. One definition validates a profile file (with path-qualified messages,
see :mod:`kctl.profile.validate`), rebuilds a stored profile (:mod:`kctl.profile.serialize`)
and publishes the JSON Schema (``kctl schema``, :mod:`kctl.profile.schema`). They stay
dataclasses, so ``dataclasses.asdict`` (the store's form) and ``dataclasses.replace``
work as before; ``replace`` validates the new values.

Field types and their messages are in :mod:`kctl.profile.fields`; the cross-field rules
(:mod:`kctl.profile.checks`) run from each section's ``_judge``, on a profile file only:
a stored or hand-built profile is typed, not judged again. Everything else (launch argv,
docker run spec, Dockerfile, gate plan) is derived from these values by pure functions.

Defaults here are the documented defaults; ``profiles/reference.yaml`` comments every key.
"""

from __future__ import annotations

from dataclasses import field
from typing import Annotated, Literal

from pydantic import (
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationInfo,
    WithJsonSchema,
    model_validator,
)
from pydantic.dataclasses import dataclass

from kctl.profile import checks, rules
from kctl.profile.fields import (
    Algorithm,
    AttentionBackend,
    CompletedFraction,
    Concurrency,
    ContainerPath,
    ContextTokens,
    CudaArch,
    CudaGraphMaxBs,
    DraftPath,
    Env,
    EnvName,
    ExtraArg,
    FatalPattern,
    GateCount,
    GateCount0,
    GateTokens,
    Gpus,
    Host,
    HostPath,
    ImageRef,
    K8sSecret,
    KvCacheDtype,
    LatencyRatio,
    MemFraction,
    MinRatio,
    ModelPath,
    Port,
    Ratio,
    RatioMap,
    RepoDir,
    SecretFile,
    ServedName,
    SglangVersion,
    ShmSize,
    Speedup,
    Tolerance,
    VocabSize,
    WeightMap,
    one_of,
)
from kctl.profile.rules import Bool, NonNegFloat, NonNegInt, PosFloat, PosInt, Str

VerifyKernel = Literal["kdtree", "none"]
RuntimeKind = Literal["docker", "local"]
OnInconclusive = Literal["revert", "promote"]

#: unknown keys are errors
CONFIG = ConfigDict(extra="forbid")


@dataclass(frozen=True, config=CONFIG)
class ImageSpec:
    """How the serving image is built (docker runtime only)."""

    base: ImageRef = "lmsysorg/sglang:v0.5.10-cu130"
    #: path of the kernel package source, relative to the repository root; None = no kernel
    kernel_source: RepoDir | None = None
    #: TORCH_CUDA_ARCH_LIST entries, e.g. ("12.0",) for RTX PRO 6000 Blackwell
    cuda_archs: tuple[CudaArch, ...] = ("12.0",)
    #: tests only: install the SGLang-compatible simulator as the `sglang` package, so the
    #: unchanged `python3 -m sglang.launch_server ...` command runs it inside the container
    install_simulator: Bool = False
    #: the SGLang release the image holds; None = the version in ``base``'s tag
    sglang: SglangVersion | None = None

    @model_validator(mode="after")
    def _judge(self, info: ValidationInfo) -> ImageSpec:
        if rules.from_file(info):
            rules.report("image", checks.image_problems(self))
        return self


@dataclass(frozen=True, config=CONFIG)
class SpeculativeSpec:
    algorithm: Algorithm = "EAGLE3"
    draft_model_path: DraftPath | None = None
    num_steps: PosInt = 3
    eagle_topk: PosInt = 1
    num_draft_tokens: PosInt = 4


@dataclass(frozen=True, config=CONFIG)
class SecretRef:
    """Where a secret lives, never its value: exactly one of ``env`` (an environment
    variable of kctl's) or ``file`` (a file only its owner reads). kctl reads the value
    when it starts the server or talks to it, and shows the reference
    (``<secret:env HF_TOKEN>``) everywhere else. ``k8s`` names the Kubernetes Secret
    (``name/key``) ``kctl render --k8s`` refers to; by default ``kctl-secrets/<variable>``."""

    env: EnvName | None = None
    file: SecretFile | None = None
    k8s: K8sSecret | None = None

    @model_validator(mode="after")
    def _one_source(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise rules.problem(
                "must name exactly one place the secret lives: env: VARIABLE (an "
                "environment variable of kctl's) or file: /absolute/path"
            )
        return self


SECRETS_ADAPTER = TypeAdapter(dict[EnvName, SecretRef])
_SECRET_REF_SCHEMA = {k: v for k, v in TypeAdapter(SecretRef).json_schema().items() if k != "title"}
#: ``server.secrets`` in a file: variable names to references, the reference inline
SECRETS_SCHEMA = WithJsonSchema(
    {
        "type": "object",
        "patternProperties": {rules.ENV_NAME_PATTERN: _SECRET_REF_SCHEMA},
        "additionalProperties": False,
    }
)


@dataclass(frozen=True, config=CONFIG)
class ServerSpec:
    """The `python3 -m sglang.launch_server` invocation."""

    model_path: ModelPath = Field(default="", validate_default=True)
    served_model_name: ServedName | None = None
    host: Host = "127.0.0.1"
    port: Port = 30000
    tp: PosInt = 1
    attention_backend: AttentionBackend = "triton"
    cuda_graphs: Bool = True
    cuda_graph_max_bs: CudaGraphMaxBs | None = None
    mem_fraction_static: MemFraction | None = None
    trust_remote_code: Bool = True
    kv_cache_dtype: KvCacheDtype = "auto"
    speculative: SpeculativeSpec | None = None
    #: which verify-attention path the profile expects to run: health checks the
    #: kernel's activation log line for "kdtree" and its absence for "none"
    verify_kernel: Annotated[VerifyKernel, one_of("'kdtree', 'none'")] = "none"
    extra_args: tuple[ExtraArg, ...] = ()
    env: Env = ()
    #: environment variables whose values are secrets, as references: the server gets
    #: the value in its environment; kctl shows and stores only the reference
    secrets: Annotated[
        tuple[tuple[str, SecretRef], ...],
        rules.pairs(SECRETS_ADAPTER),
        SECRETS_SCHEMA,
    ] = ()
    #: SGLang's API key (``--api-key``), as a secret reference; kctl sends it as
    #: ``Authorization: Bearer`` on every request and hands it to the server in a file
    api_key: SecretRef | None = None

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def secrets_dict(self) -> dict[str, SecretRef]:
        return dict(self.secrets)

    @model_validator(mode="after")
    def _judge(self, info: ValidationInfo) -> ServerSpec:
        if rules.from_file(info):
            rules.report("server", checks.server_problems(self))
        return self


@dataclass(frozen=True, config=CONFIG)
class VolumeSpec:
    host: HostPath
    container: ContainerPath
    read_only: Bool = True


@dataclass(frozen=True, config=CONFIG)
class RuntimeSpec:
    kind: Annotated[RuntimeKind, one_of("'docker', 'local'")] = "docker"
    #: "all", or a tuple of device indices; () = no GPUs (tests)
    gpus: Gpus = "all"
    shm_size: ShmSize = "32g"
    volumes: tuple[VolumeSpec, ...] = ()
    stop_timeout_s: PosFloat = 60.0
    #: how many stopped containers of earlier deployments to keep for fast rollback
    retain: NonNegInt = 3

    @model_validator(mode="after")
    def _judge(self, info: ValidationInfo) -> RuntimeSpec:
        if rules.from_file(info):
            rules.report("runtime", checks.runtime_problems(self))
        return self


@dataclass(frozen=True, config=CONFIG)
class HealthSpec:
    deadline_s: PosFloat = 900.0
    poll_interval_s: PosFloat = 2.0
    request_timeout_s: PosFloat = 30.0
    #: require one real generation before calling the server healthy
    require_generation: Bool = True
    #: extra regular expressions that end the wait at once when a log line matches
    fatal_patterns: tuple[FatalPattern, ...] = ()

    @model_validator(mode="after")
    def _judge(self, info: ValidationInfo) -> HealthSpec:
        if rules.from_file(info):
            rules.report("health", checks.health_problems(self))
        return self


@dataclass(frozen=True, config=CONFIG)
class ObjectiveSpec:
    """Traffic-mix weighted objective: sum(weight * ratio) / sum(weight) >= min_ratio."""

    weights: WeightMap
    min_ratio: Ratio = 1.0


@dataclass(frozen=True, config=CONFIG)
class PolicySpec:
    min_ratio: MinRatio = 1.0
    min_ratio_per_context: RatioMap = ()
    objective: ObjectiveSpec | None = None
    on_inconclusive: Annotated[OnInconclusive, one_of("'revert', 'promote'")] = "revert"
    #: a stored baseline measurement older than this is measured again
    baseline_max_age_s: PosFloat = 7 * 24 * 3600.0
    #: extra repeats per context when the ratio's spread straddles a threshold
    max_extra_repeats: NonNegInt = 4
    #: fraction of planned requests that must complete
    min_completed_fraction: CompletedFraction = 1.0
    #: stop measuring once a binding context is clearly below its threshold (FAIL): the
    #: contexts after it, the concurrency phase and the correctness probes are skipped
    stop_at_first_fail: Bool = False
    #: how far the candidate's mean speculative acceptance length may move from the
    #: baseline's, as a fraction of it (a correctness signal: a subtly wrong verify kernel
    #: accepts fewer, or more, draft tokens long before greedy outputs differ)
    accept_length_tolerance: Tolerance = 0.02
    #: optional latency gates, candidate over baseline per context: median TTFT and the
    #: inter-token latency percentiles; None = shown, not gated
    max_ttft_ratio: LatencyRatio | None = None
    max_itl_p50_ratio: LatencyRatio | None = None
    max_itl_p99_ratio: LatencyRatio | None = None

    def threshold(self, context: int) -> float:
        return dict(self.min_ratio_per_context).get(context, self.min_ratio)


@dataclass(frozen=True, config=CONFIG)
class CorrectnessSpec:
    prompts: GateCount0 = 3
    tokens: GateTokens = 16
    #: how many prompts may differ from the baseline's recorded greedy output
    max_mismatched_prompts: NonNegInt = 0


@dataclass(frozen=True, config=CONFIG)
class GateSpec:
    contexts: tuple[ContextTokens, ...] = (5700, 23000, 91000)
    output_tokens: GateTokens = 128
    repeats: GateCount = 3
    warmup: GateCount0 = 1
    concurrency: Concurrency | None = None
    request_timeout_s: PosFloat = 600.0
    seed: NonNegInt = 0
    #: the model's vocabulary size: gate prompts draw token ids below it (and below what
    #: the server reports in /get_model_info where it does); None = 32000
    vocab_size: VocabSize | None = None
    policy: PolicySpec = field(default_factory=PolicySpec)
    correctness: CorrectnessSpec = field(default_factory=CorrectnessSpec)

    @model_validator(mode="after")
    def _judge(self, info: ValidationInfo) -> GateSpec:
        if rules.from_file(info):
            rules.report("gate", checks.gate_problems(self))
        return self


@dataclass(frozen=True, config=CONFIG)
class SimulatorSpec:
    """Used only with ``--simulate``: how the SGLang-compatible simulator stands in."""

    #: time compression: load time and token latencies are divided by this
    speedup: Speedup = 50.0
    #: simulated model load seconds before compression (330 s measured for Kimi K2.6)
    load_s: NonNegFloat = 330.0


@dataclass(frozen=True, config=CONFIG)
class Profile:
    name: Annotated[Str, Field(json_schema_extra={"pattern": rules.NAME_PATTERN})]
    #: path of the file this profile was loaded from
    source: Str
    description: Str = ""
    #: file path of the known-good baseline profile; None when this profile is a baseline
    baseline: Str | None = None
    image: ImageSpec = field(default_factory=ImageSpec)
    server: ServerSpec = field(default_factory=ServerSpec)
    runtime: RuntimeSpec = field(default_factory=RuntimeSpec)
    health: HealthSpec = field(default_factory=HealthSpec)
    gate: GateSpec = field(default_factory=GateSpec)
    simulator: SimulatorSpec = field(default_factory=SimulatorSpec)
    #: sha256 of the resolved content (source path and name excluded); stable across runs
    content_hash: Str = ""
    #: the ``--set FIELD=VALUE`` items applied on top of the files, as given: the values
    #: above already hold them (and so does the hash); kept to say where they came from
    overrides: tuple[Str, ...] = ()
