"""The resolved profile: frozen pydantic dataclasses, the single definition of what a
deployment is. One definition validates a profile file (with path-qualified messages,
see :mod:`kctl.profile.validate`), rebuilds a stored profile (:mod:`kctl.profile.serialize`)
and publishes the JSON Schema (``kctl schema``). They stay dataclasses, so
``dataclasses.asdict`` (the store's form) and ``dataclasses.replace`` work as before.

Everything else (launch argv, docker run spec, Dockerfile, gate plan) is derived from these
values by pure functions. Field types and their messages are in :mod:`kctl.profile.rules`;
cross-field rules are each section's ``_judge`` and run only on a profile file.

Defaults here are the documented defaults; ``profiles/reference.yaml`` comments every key.
"""

from __future__ import annotations

from dataclasses import field
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, Strict, TypeAdapter, ValidationInfo, model_validator
from pydantic.dataclasses import dataclass

from kctl.profile import rules
from kctl.profile.rules import (
    ATTENTION_BACKENDS,
    KV_CACHE_DTYPES,
    SPECULATIVE_ALGORITHMS,
    Bool,
    Found,
    NonNegFloat,
    NonNegInt,
    PosFloat,
    PosInt,
    Str,
    enum,
    member_of,
    safe,
    says,
)

VerifyKernel = Literal["kdtree", "none"]
RuntimeKind = Literal["docker", "local"]
OnInconclusive = Literal["revert", "promote"]

#: unknown keys are errors; validation errors show no pydantic URL
CONFIG = ConfigDict(extra="forbid", hide_input_in_errors=False)

# -- field types with their messages ------------------------------------------------------

IMAGE_REF = "must be an image reference, e.g. 'lmsysorg/sglang:v0.5.10-cu130'"
ImageRef = Annotated[
    str,
    Strict(),
    Field(min_length=1, pattern=r"\S"),
    says(IMAGE_REF),
    safe(IMAGE_REF, rules.IMAGE_REF_PATTERN),
]
KERNEL_SOURCE = (
    "must be a directory relative to the repository root, e.g. 'kernels', or null for no kernel"
)
RepoDir = Annotated[
    str,
    Strict(),
    Field(min_length=1, pattern=r"\S"),
    says(KERNEL_SOURCE),
    rules.judged(rules.repo_dir_problem),
]
CUDA_ARCH = (
    "must be a CUDA arch as TORCH_CUDA_ARCH_LIST spells it, a quoted string such as "
    "'12.0' (sm_120) or '9.0a'"
)
CudaArch = Annotated[
    str,
    Strict(),
    Field(json_schema_extra={"pattern": rules.CUDA_ARCH_PATTERN}),
    says(CUDA_ARCH),
    safe(CUDA_ARCH, rules.CUDA_ARCH_PATTERN),
]
MODEL_PATH = "is required: the model directory as the server sees it, e.g. '/models/Kimi-K2.6'"
ModelPath = Annotated[
    str,
    Strict(),
    says(MODEL_PATH),
    rules.judged(lambda v: None if v.strip() else MODEL_PATH),
    safe(MODEL_PATH),
]
ServedName = Annotated[
    str,
    Strict(),
    Field(min_length=1, pattern=r"\S"),
    says("must be a non-empty string or null"),
    safe("must be a non-empty string or null"),
]
HOST = "must be an address to bind, e.g. '127.0.0.1' or '0.0.0.0'"
Host = Annotated[
    str, Strict(), Field(min_length=1, pattern=r"\S"), says(HOST), safe(HOST, rules.HOST_PATTERN)
]
Port = Annotated[
    int, Strict(), Field(ge=1, le=65535), says("must be a TCP port between 1 and 65535")
]
AttentionBackend = Annotated[
    str,
    Strict(),
    enum(ATTENTION_BACKENDS),
    member_of(ATTENTION_BACKENDS),
    says(
        "must be one of SGLang 0.5.10's attention backends: "
        + rules.choices_text(ATTENTION_BACKENDS)
    ),
]
KvCacheDtype = Annotated[
    str,
    Strict(),
    enum(KV_CACHE_DTYPES),
    member_of(KV_CACHE_DTYPES),
    says("must be one of " + rules.choices_text(KV_CACHE_DTYPES)),
]
Algorithm = Annotated[
    str,
    Strict(),
    enum(SPECULATIVE_ALGORITHMS),
    member_of(SPECULATIVE_ALGORITHMS),
    says("must be one of " + rules.choices_text(SPECULATIVE_ALGORITHMS)),
]
DraftPath = Annotated[
    str,
    Strict(),
    Field(min_length=1, pattern=r"\S"),
    says("must be a non-empty path or null"),
    safe("must be a non-empty path or null"),
]
CudaGraphMaxBs = Annotated[
    int,
    Strict(),
    Field(ge=1),
    says("must be a positive integer or null (SGLang picks it from the GPU memory)"),
]
MemFraction = Annotated[
    float,
    Strict(),
    Field(gt=0, lt=1, allow_inf_nan=False),
    says("must be a fraction between 0 and 1 (exclusive), e.g. 0.85, or null for SGLang's default"),
]
ExtraArg = Annotated[
    str,
    Strict(),
    Field(min_length=1, pattern=r"\S"),
    says("must be a non-empty string; quote numbers, e.g. ['--max-running-requests', '48']"),
    rules.judged(rules.extra_arg_problem),
]
EnvName = Annotated[
    str,
    Strict(),
    Field(pattern=rules.ENV_NAME_PATTERN),
    says("must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"),
]
EnvValue = Annotated[
    str,
    Strict(),
    says("must be a string; quote it in YAML, e.g. '1' (null removes an inherited variable)"),
    rules.judged(rules.shell_problem),
]
ContextKey = Annotated[
    int,
    Strict(),
    Field(ge=1),
    says("keys must be context lengths in tokens (positive integers)"),
]
Ratio = Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False), says("must be a ratio > 0")]
Weight = Annotated[
    float,
    Strict(),
    Field(gt=0, allow_inf_nan=False),
    says("must be a positive weight (share of traffic)"),
]
_ENV = TypeAdapter(dict[EnvName, EnvValue])
_RATIOS = TypeAdapter(dict[ContextKey, Ratio])
_WEIGHTS = TypeAdapter(dict[ContextKey, Weight])
Env = Annotated[
    tuple[tuple[str, str], ...],
    rules.pairs(_ENV, drop_null=True),
    rules.mapping_schema(_ENV, drop_null=True),
]
RatioMap = Annotated[
    tuple[tuple[int, float], ...], rules.pairs(_RATIOS), rules.mapping_schema(_RATIOS)
]
WeightMap = Annotated[
    tuple[tuple[int, float], ...], rules.pairs(_WEIGHTS), rules.mapping_schema(_WEIGHTS)
]
HOST_PATH = "must be an absolute host path, e.g. '/models'"
HostPath = Annotated[str, Strict(), Field(pattern=r"^/"), says(HOST_PATH), safe(HOST_PATH)]
CONTAINER_PATH = "must be an absolute path inside the container, e.g. '/models'"
ContainerPath = Annotated[
    str, Strict(), Field(pattern=r"^/"), says(CONTAINER_PATH), safe(CONTAINER_PATH)
]
FatalPattern = Annotated[
    str,
    Strict(),
    Field(min_length=1, pattern=r"\S"),
    says("must be a non-empty regular expression"),
]
ShmSize = Annotated[
    str,
    Strict(),
    Field(pattern=rules.DOCKER_SIZE_PATTERN),
    says("must be a size as docker writes it, e.g. '32g'"),
]
Gpus = Annotated[str | tuple[int, ...], rules.gpus_rule, rules.gpus_schema]


def _literal(choices: str) -> object:
    return says("must be one of " + choices)


# -- the sections ---------------------------------------------------------------------------


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

    @model_validator(mode="after")
    def _judge(self, info: ValidationInfo) -> ImageSpec:
        if rules.from_file(info):
            rules.report("image", _image_problems(self))
        return self


@dataclass(frozen=True, config=CONFIG)
class SpeculativeSpec:
    algorithm: Algorithm = "EAGLE3"
    draft_model_path: DraftPath | None = None
    num_steps: PosInt = 3
    eagle_topk: PosInt = 1
    num_draft_tokens: PosInt = 4


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
    verify_kernel: Annotated[VerifyKernel, _literal("'kdtree', 'none'")] = "none"
    extra_args: tuple[ExtraArg, ...] = ()
    env: Env = ()

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    @model_validator(mode="after")
    def _judge(self, info: ValidationInfo) -> ServerSpec:
        if rules.from_file(info):
            rules.report("server", _server_problems(self))
        return self


@dataclass(frozen=True, config=CONFIG)
class VolumeSpec:
    host: HostPath
    container: ContainerPath
    read_only: Bool = True


@dataclass(frozen=True, config=CONFIG)
class RuntimeSpec:
    kind: Annotated[RuntimeKind, _literal("'docker', 'local'")] = "docker"
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
            seen: set[str] = set()
            found: list[Found] = []
            for i, v in enumerate(self.volumes):
                if v.container in seen:
                    found.append(
                        (
                            ("volumes", i, "container"),
                            "is mounted twice; each container path may appear once",
                            v.container,
                        )
                    )
                seen.add(v.container)
            rules.report("runtime", found)
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
            rules.report("health", _health_problems(self))
        return self


@dataclass(frozen=True, config=CONFIG)
class ObjectiveSpec:
    """Traffic-mix weighted objective: sum(weight * ratio) / sum(weight) >= min_ratio."""

    weights: WeightMap
    min_ratio: Ratio = 1.0


@dataclass(frozen=True, config=CONFIG)
class PolicySpec:
    min_ratio: Annotated[
        Ratio,
        says("must be a ratio > 0 (candidate tok/s over baseline tok/s; 1.0 = no slower)"),
    ] = 1.0
    min_ratio_per_context: RatioMap = ()
    objective: ObjectiveSpec | None = None
    on_inconclusive: Annotated[OnInconclusive, _literal("'revert', 'promote'")] = "revert"
    #: a stored baseline measurement older than this is measured again
    baseline_max_age_s: PosFloat = 7 * 24 * 3600.0
    #: extra repeats per context when the ratio's spread straddles a threshold
    max_extra_repeats: NonNegInt = 4
    #: fraction of planned requests that must complete
    min_completed_fraction: Annotated[
        float,
        Strict(),
        Field(gt=0, le=1, allow_inf_nan=False),
        says("must be a fraction in (0, 1], e.g. 1.0"),
    ] = 1.0
    #: stop measuring once a binding context is clearly below its threshold (FAIL): the
    #: contexts after it, the concurrency phase and the correctness probes are skipped
    stop_at_first_fail: Bool = False

    def threshold(self, context: int) -> float:
        return dict(self.min_ratio_per_context).get(context, self.min_ratio)


@dataclass(frozen=True, config=CONFIG)
class CorrectnessSpec:
    prompts: NonNegInt = 3
    tokens: PosInt = 16
    #: how many prompts may differ from the baseline's recorded greedy output
    max_mismatched_prompts: NonNegInt = 0


@dataclass(frozen=True, config=CONFIG)
class GateSpec:
    contexts: tuple[PosInt, ...] = (5700, 23000, 91000)
    output_tokens: PosInt = 128
    repeats: PosInt = 3
    warmup: NonNegInt = 1
    concurrency: (
        Annotated[
            int,
            Strict(),
            Field(ge=1),
            says("must be a positive integer, or null for one request at a time"),
        ]
        | None
    ) = None
    request_timeout_s: PosFloat = 600.0
    seed: NonNegInt = 0
    policy: PolicySpec = field(default_factory=PolicySpec)
    correctness: CorrectnessSpec = field(default_factory=CorrectnessSpec)

    @model_validator(mode="after")
    def _judge(self, info: ValidationInfo) -> GateSpec:
        if rules.from_file(info):
            rules.report("gate", _gate_problems(self))
        return self


@dataclass(frozen=True, config=CONFIG)
class SimulatorSpec:
    """Used only with ``--simulate``: how the SGLang-compatible simulator stands in."""

    #: time compression: load time and token latencies are divided by this
    speedup: Annotated[
        float,
        Strict(),
        Field(ge=1, allow_inf_nan=False),
        says("must be a number >= 1 (how many times faster than real time the simulator runs)"),
    ] = 50.0
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


# -- cross-field rules (a profile file only) ----------------------------------------------


def _image_problems(image: ImageSpec) -> list[Found]:
    if not image.cuda_archs:
        return [(("cuda_archs",), "must list at least one CUDA arch, e.g. ['12.0']", [])]
    if len(set(image.cuda_archs)) != len(image.cuda_archs):
        return [
            (
                ("cuda_archs",),
                "lists an arch twice; remove the duplicate",
                list(image.cuda_archs),
            )
        ]
    return []


def _kernel_problems(s: ServerSpec) -> list[Found]:
    env = s.env_dict()
    found: list[Found] = []
    if s.verify_kernel != "kdtree":
        if env.get("KDTREE_VERIFY") == "1":
            found.append(
                (
                    ("env", "KDTREE_VERIFY"),
                    "switches the kdtree kernel on but server.verify_kernel is 'none'; set "
                    "server.verify_kernel: kdtree or remove the variable",
                    "1",
                )
            )
        return found
    if s.attention_backend != "triton":
        found.append(
            (
                ("attention_backend",),
                "the kdtree verify kernel patches SGLang's triton backend only; set "
                "'triton' or set server.verify_kernel: none",
                s.attention_backend,
            )
        )
    if env.get("KDTREE_VERIFY") != "1":
        found.append(
            (
                ("env", "KDTREE_VERIFY"),
                "server.verify_kernel is 'kdtree', so the kernel must be switched on: set "
                "server.env.KDTREE_VERIFY: '1'",
                env.get("KDTREE_VERIFY"),
            )
        )
    if s.speculative is None:
        found.append(
            (
                ("speculative",),
                "server.verify_kernel 'kdtree' serves speculative target verification, which "
                "only runs with speculative decoding; configure server.speculative",
                None,
            )
        )
    if s.kv_cache_dtype not in ("auto", "bf16", "bfloat16"):
        found.append(
            (
                ("kv_cache_dtype",),
                "the kdtree verify kernel reads a bf16 KV cache only; set 'auto' or 'bf16'",
                s.kv_cache_dtype,
            )
        )
    return found


def _speculative_problems(spec: SpeculativeSpec) -> list[Found]:
    found: list[Found] = []
    if spec.algorithm in ("EAGLE3", "STANDALONE") and spec.draft_model_path is None:
        found.append(
            (
                ("speculative", "draft_model_path"),
                f"is required for {spec.algorithm}: the draft model directory, e.g. "
                "'/models/Kimi-K26-eagle3'",
                None,
            )
        )
    if spec.eagle_topk == 1 and spec.num_draft_tokens != spec.num_steps + 1:
        found.append(
            (
                ("speculative", "num_draft_tokens"),
                f"must be num_steps + 1 ({spec.num_steps + 1}) when eagle_topk is 1 (SGLang "
                "would silently override it)",
                spec.num_draft_tokens,
            )
        )
    return found


def _server_problems(s: ServerSpec) -> list[Found]:
    found = _kernel_problems(s)
    env = s.env_dict()
    for var, owner in rules.SIMULATOR_ENV.items():
        if var in env:
            found.append((("env", var), f"is set by kctl from {owner}; set that instead", env[var]))
    if s.speculative is not None:
        found += _speculative_problems(s.speculative)
    return found


def _health_problems(h: HealthSpec) -> list[Found]:
    import re

    found: list[Found] = []
    if h.poll_interval_s >= h.deadline_s:
        found.append(
            (
                ("poll_interval_s",),
                f"must be shorter than health.deadline_s ({h.deadline_s:g})",
                h.poll_interval_s,
            )
        )
    for i, pattern in enumerate(h.fatal_patterns):
        try:
            re.compile(pattern)
        except re.error as exc:
            found.append(
                (
                    ("fatal_patterns", i),
                    f"is not a valid regular expression ({exc}); escape special characters "
                    "with a backslash",
                    pattern,
                )
            )
    return found


def _named_contexts(
    pairs: tuple[tuple[int, float], ...], gated: set[int], where: tuple[str, ...], what: str
) -> list[Found]:
    return [
        (
            (*where, str(ctx)),
            f"names a context that gate.contexts does not measure; add it there or {what}",
            ctx,
        )
        for ctx, _ in pairs
        if ctx not in gated
    ]


def _gate_problems(gate: GateSpec) -> list[Found]:
    found: list[Found] = []
    if not gate.contexts:
        found.append((("contexts",), "must list at least one context length", []))
    seen: set[int] = set()
    for i, c in enumerate(gate.contexts):
        if c in seen:
            found.append((("contexts", i), "is listed twice; remove the duplicate", c))
        seen.add(c)
    policy = gate.policy
    found += _named_contexts(
        policy.min_ratio_per_context,
        seen,
        ("policy", "min_ratio_per_context"),
        "remove this override",
    )
    if policy.objective is not None:
        if not policy.objective.weights:
            found.append(
                (
                    ("policy", "objective", "weights"),
                    "must weight at least one context, e.g. {5700: 0.6, 23000: 0.3, 91000: 0.1}",
                    {},
                )
            )
        found += _named_contexts(
            policy.objective.weights,
            seen,
            ("policy", "objective", "weights"),
            "remove the weight",
        )
    corr = gate.correctness
    if corr.max_mismatched_prompts > corr.prompts:
        found.append(
            (
                ("correctness", "max_mismatched_prompts"),
                f"must not exceed gate.correctness.prompts ({corr.prompts})",
                corr.max_mismatched_prompts,
            )
        )
    return found
