"""The profile's field types: each an ``Annotated`` pydantic type carrying its
constraints (published in the JSON Schema too) and the message a wrong value gets, e.g.
``must be a TCP port between 1 and 65535``. Helpers and vocabularies are in
:mod:`kctl.profile.rules`; the model that uses these types is :mod:`kctl.profile.model`.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, Strict, TypeAdapter

from kctl.profile import rules
from kctl.profile.rules import (
    ATTENTION_BACKENDS,
    KV_CACHE_DTYPES,
    SPECULATIVE_ALGORITHMS,
    enum,
    member_of,
    safe,
    says,
)

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
SGLANG_VERSION = "must be an SGLang release version, e.g. '0.5.10' or '0.5.10.post1'"
SglangVersion = Annotated[
    str,
    Strict(),
    Field(pattern=rules.SGLANG_VERSION_PATTERN),
    says(SGLANG_VERSION),
]
RepoDir = Annotated[
    str,
    Strict(),
    Field(min_length=1, pattern=r"\S"),
    says(KERNEL_SOURCE),
    rules.judged(rules.repo_dir_problem),
    rules.clean_path,
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
    rules.clean_path,
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
        "must be one of the attention backends of a known SGLang release: "
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
    rules.clean_path,
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
    rules.judged(rules.env_problem),
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
SECRET_FILE = "must be the absolute path of a file holding the secret, e.g. '/etc/kctl/hf-token'"
SecretFile = Annotated[
    str, Strict(), Field(pattern=r"^/"), says(SECRET_FILE), safe(SECRET_FILE), rules.clean_path
]
K8S_SECRET = (
    "must be '<secret name>/<key>' of a Kubernetes Secret in the release's namespace, "
    "e.g. 'kimi-secrets/hf-token'"
)
K8sSecret = Annotated[
    str,
    Strict(),
    Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[-._a-zA-Z0-9]+$"),
    says(K8S_SECRET),
]
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
HostPath = Annotated[
    str, Strict(), Field(pattern=r"^/"), says(HOST_PATH), safe(HOST_PATH), rules.clean_path
]
CONTAINER_PATH = "must be an absolute path inside the container, e.g. '/models'"
ContainerPath = Annotated[
    str,
    Strict(),
    Field(pattern=r"^/"),
    says(CONTAINER_PATH),
    safe(CONTAINER_PATH),
    rules.clean_path,
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

MinRatio = Annotated[
    Ratio, says("must be a ratio > 0 (candidate tok/s over baseline tok/s; 1.0 = no slower)")
]
CompletedFraction = Annotated[
    float,
    Strict(),
    Field(gt=0, le=1, allow_inf_nan=False),
    says("must be a fraction in (0, 1], e.g. 1.0"),
]
Concurrency = Annotated[
    int,
    Strict(),
    Field(ge=1, le=1024),
    says("must be an integer from 1 to 1024, or null for one request at a time"),
]
#: bounds on the gate's sizes: a value past them is a typo that would run for days
MAX_GATE_TOKENS = 32768
GateTokens = Annotated[
    int,
    Strict(),
    Field(ge=1, le=MAX_GATE_TOKENS),
    says(f"must be an integer from 1 to {MAX_GATE_TOKENS} (tokens generated per request)"),
]
MAX_CONTEXT = 4_194_304
ContextTokens = Annotated[
    int,
    Strict(),
    Field(ge=1, le=MAX_CONTEXT),
    says(f"must be an integer from 1 to {MAX_CONTEXT} (prompt tokens of one gate context)"),
]
GateCount = Annotated[
    int, Strict(), Field(ge=1, le=1000), says("must be an integer from 1 to 1000")
]
GateCount0 = Annotated[
    int, Strict(), Field(ge=0, le=1000), says("must be an integer from 0 to 1000")
]
Speedup = Annotated[
    float,
    Strict(),
    Field(ge=1, allow_inf_nan=False),
    says("must be a number >= 1 (how many times faster than real time the simulator runs)"),
]


def one_of(choices: str) -> object:
    """Metadata: the message of a ``Literal`` field (``choices`` as the message lists them)."""
    return says("must be one of " + choices)


Tolerance = Annotated[
    float,
    Strict(),
    Field(ge=0, lt=1, allow_inf_nan=False),
    says("must be a fraction in [0, 1), e.g. 0.02 for 2%"),
]
LatencyRatio = Annotated[
    float,
    Strict(),
    Field(gt=0, allow_inf_nan=False),
    says("must be a ratio > 0 (candidate over baseline; 1.1 = up to 10% slower), or null"),
]
VocabSize = Annotated[
    int,
    Strict(),
    Field(gt=356),
    says("must be the model's vocabulary size, an integer above 356 (e.g. 163840), or null"),
]
