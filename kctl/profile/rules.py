"""What a profile field's Python type alone cannot say: ranges, choices, patterns, the
SGLang vocabularies they come from (every known release's, from the release table), and
the message each field reports.

Each field type here is an ``Annotated`` pydantic type: constraints that always hold
(type, range) live in the core schema, so they also publish in the JSON Schema; the
message wraps them (:func:`says`), because the same line has to serve a wrong type and an
out-of-range value alike. Rules that judge what a *file* asks for (shell syntax, paths
inside the repository, image references) run only when a profile file is loaded
(:data:`FILE`): a profile rebuilt from the store or written in Python is never re-judged.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    Field,
    Strict,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    WrapValidator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from kctl.sglang.kernel_support import KDTREE_BACKEND
from kctl.sglang.releases import releases

#: validation context key: set by the loader when the input is a profile file
FILE = "kctl.profile.file"
#: the error type of every problem kctl words itself
ERROR_TYPE = "kctl_profile"


def _every_release(flag: str) -> tuple[str, ...]:
    """The choices of ``flag`` in any known SGLang release, in first-seen order: what a
    field accepts on its own. The profile's own release then decides (see
    :func:`kctl.launch.argv_problems`)."""
    out: dict[str, None] = {}
    for rel in releases():
        out.update(dict.fromkeys(str(c) for c in rel.choices(flag) or ()))
    return tuple(out)


#: ``--attention-backend`` choices of every known release, and kctl's own ``kdtree``
ATTENTION_BACKENDS = (*_every_release("--attention-backend"), KDTREE_BACKEND)
#: ``--kv-cache-dtype`` choices of every known release
KV_CACHE_DTYPES = _every_release("--kv-cache-dtype")
#: ``--speculative-algorithm`` choices of the releases that list them (free text from
#: 0.5.12 on, where algorithms register by name)
SPECULATIVE_ALGORITHMS = _every_release("--speculative-algorithm")
#: flags kctl derives from typed fields, every release's spelling, and the field to set
#: instead; ``extra_args`` must not reach them by any spelling (alias, abbreviation)
MANAGED_FLAGS: dict[str, str] = {
    "--model-path": "server.model_path",
    "--served-model-name": "server.served_model_name",
    "--host": "server.host",
    "--port": "server.port",
    "--tp-size": "server.tp",
    "--attention-backend": "server.attention_backend",
    "--disable-cuda-graph": "server.cuda_graphs",
    "--cuda-graph-backend-decode": "server.cuda_graphs",
    "--cuda-graph-backend-prefill": "server.cuda_graphs",
    "--cuda-graph-max-bs": "server.cuda_graph_max_bs",
    "--cuda-graph-max-bs-decode": "server.cuda_graph_max_bs",
    "--mem-fraction-static": "server.mem_fraction_static",
    "--trust-remote-code": "server.trust_remote_code",
    "--kv-cache-dtype": "server.kv_cache_dtype",
    "--speculative-algorithm": "server.speculative.algorithm",
    "--speculative-draft-model-path": "server.speculative.draft_model_path",
    "--speculative-num-steps": "server.speculative.num_steps",
    "--speculative-eagle-topk": "server.speculative.eagle_topk",
    "--speculative-num-draft-tokens": "server.speculative.num_draft_tokens",
}
_NO_FIELD = "remove it from extra_args: the profile has no field for {what}, and kctl gates {how}"
#: settings that ``extra_args`` must not change by any flag (keys of
#: :data:`kctl.sglang.argv.effects.SETTINGS`), and the fix: the profile field to use
#: instead. The API key's fix is :func:`kctl.launch.api_key_fix`.
SETTING_FIXES: dict[str, str] = {
    "model": "set server.model_path instead",
    "tokenizer": _NO_FIELD.format(
        what="a tokenizer", how="the model at server.model_path with its own tokenizer"
    ),
    "revision": _NO_FIELD.format(
        what="a revision", how="the weights at server.model_path as they are"
    ),
    "load_format": _NO_FIELD.format(
        what="a load format", how="the weights at server.model_path as they are"
    ),
    "model_override": _NO_FIELD.format(
        what="a model config override", how="the model at server.model_path as it is"
    ),
    "tp": "set server.tp instead",
    "dp": _NO_FIELD.format(
        what="data parallelism", how="one replica of server.tp GPUs; a fleet adds replicas"
    ),
    "attn_dp": _NO_FIELD.format(
        what="attention data parallelism", how="one replica of server.tp GPUs"
    ),
    "pp": _NO_FIELD.format(what="pipeline parallelism", how="one replica of server.tp GPUs"),
    "attention_backend": "set server.attention_backend instead",
    "prefill_attention_backend": "set server.attention_backend instead (it serves every phase)",
    "decode_attention_backend": "set server.attention_backend instead (it serves every phase)",
    "draft_attention_backend": "set server.attention_backend instead (kctl derives the draft "
    "model's backend from it)",
    "speculative_attention_mode": _NO_FIELD.format(
        what="the speculative attention mode", how="what server.speculative declares"
    ),
    "draft_kv_cache_dtype": "set server.kv_cache_dtype instead (the draft model uses the same)",
    "speculative_adaptive": _NO_FIELD.format(
        what="adaptive speculative decoding", how="what server.speculative declares"
    ),
    "draft_model": "set server.speculative.draft_model_path instead",
    "decode_cuda_graphs": "set server.cuda_graphs instead",
    "decode_cuda_graph_sizes": "set server.cuda_graph_max_bs instead",
    "prefill_cuda_graphs": "set server.cuda_graphs instead (it turns CUDA graphs on or off "
    "in every phase)",
    "prefill_cuda_graph_sizes": _NO_FIELD.format(
        what="prefill CUDA-graph sizes", how="SGLang's defaults for them"
    ),
}
#: env the ``simulator:`` section owns (see :func:`kctl.launch.launch_spec`)
SIMULATOR_ENV = {
    "KCTL_SIM_SPEEDUP": "simulator.speedup",
    "KCTL_SIM_LOAD_S": "simulator.load_s",
    "KCTL_SIM_SGLANG_VERSION": "image.sglang",
}

SGLANG_VERSION_PATTERN = r"^v?\d+\.\d+\.\d+(\.post\d+)?$"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
NAME_MESSAGE = "must be letters, digits, '.', '_' or '-', starting with a letter or digit"
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
# TORCH_CUDA_ARCH_LIST entries: "12.0", "9.0a", "10.0f", "8.6+PTX"
CUDA_ARCH_PATTERN = r"^\d{1,2}\.\d[af]?(\+PTX)?$"
# docker's size syntax for --shm-size
DOCKER_SIZE_PATTERN = r"^\d+[bkmgBKMG]?$"
# name[:tag][@digest] as docker accepts it; the value lands verbatim in a FROM line
IMAGE_REF_PATTERN = (
    r"^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-]+[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$"
)
# a directory inside the repository: plain path segments, no "..", not absolute
REPO_PATH_PATTERN = r"^[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*/?$"
# an address or host name to bind
HOST_PATTERN = r"^[A-Za-z0-9_.:\[\]-]+$"

# kctl starts the server without a shell (an argv list, an env mapping): shell syntax in
# a value arrives verbatim, which is never what its author meant, and would be dangerous
# wherever a later change let a shell see it. Expansion is refused in argv and env alike;
# command separators in argv and paths only (an env value may be a URL with "&").
_EXPANSION = re.compile(r"`|\$[({A-Za-z_]")
_COMMAND = re.compile(r"[;&|\n\r]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_LINE = re.compile(r"[\t\n\r]")


def problem(message: str) -> PydanticCustomError:
    """A validation error whose message is exactly ``message`` (pydantic formats
    ``{...}`` in a message template, so braces are escaped)."""
    return PydanticCustomError(ERROR_TYPE, message.replace("{", "{{").replace("}", "}}"))


def says(message: str) -> WrapValidator:
    """Report any failure of the wrapped type and constraints as ``message``."""

    def wrap(value: Any, handler: Callable[[Any], Any]) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise problem(message) from None

    return WrapValidator(wrap)


def from_file(info: ValidationInfo) -> bool:
    """True while a profile file is validated (not a stored or hand-built profile)."""
    return bool(info.context and info.context.get(FILE))


def judged(check: Callable[[Any], str | None]) -> WrapValidator:
    """A rule for file input only: ``check(value)`` returns the problem, or None."""

    def wrap(value: Any, handler: Callable[[Any], Any], info: ValidationInfo) -> Any:
        out = handler(value)
        if from_file(info):
            message = check(out)
            if message is not None:
                raise problem(message)
        return out

    return WrapValidator(wrap)


def _matches(pattern: str, message: str) -> Callable[[Any], str | None]:
    compiled = re.compile(pattern)
    return lambda v: None if v is None or compiled.match(v) else message


def _syntax(value: str, *patterns: re.Pattern[str]) -> str | None:
    if _CONTROL.search(value):
        return "contains a control character (such as NUL); remove it"
    for pattern in patterns:
        found = pattern.search(value)
        if found:
            what = "a line break" if found.group(0) in "\r\n" else repr(found.group(0))
            return (
                f"contains shell syntax ({what}); kctl starts the server without a shell, "
                "so it would arrive verbatim: remove it (split arguments into list items)"
            )
    return None


def shell_problem(value: str) -> str | None:
    """Why ``value`` (an argument or a path) must not reach an argv, or None."""
    return _syntax(value, _COMMAND, _EXPANSION)


def env_problem(value: str) -> str | None:
    """Why ``value`` must not be an environment value, or None (nothing expands it). Any
    control character is refused, line breaks and tabs included: a value is one line."""
    if _LINE.search(value):
        return "contains a control character (a line break or tab); a value is one line: remove it"
    return _syntax(value, _EXPANSION)


def extra_arg_problem(arg: str) -> str | None:
    """Why one ``server.extra_args`` item is refused on its own, or None. What the item
    means to SGLang (managed flags by any spelling, unknown flags, choices) is judged
    against the profile's release once the profile is whole."""
    if arg.startswith("-") and " " in arg:
        return (
            "holds a flag and its value in one item; write them as two list items, "
            "e.g. ['--max-running-requests', '48']"
        )
    return shell_problem(arg)


# -- field types ---------------------------------------------------------------------------

POSITIVE_INTEGER = "must be a positive integer"

Bool = Annotated[bool, Strict(), says("must be true or false")]
Str = Annotated[str, Strict(), says("must be a string")]
PosInt = Annotated[int, Strict(), Field(ge=1), says(POSITIVE_INTEGER)]
NonNegInt = Annotated[int, Strict(), Field(ge=0), says("must be an integer >= 0")]
PosFloat = Annotated[
    float, Strict(), Field(gt=0, allow_inf_nan=False), says("must be a positive number")
]
NonNegFloat = Annotated[
    float, Strict(), Field(ge=0, allow_inf_nan=False), says("must be a number >= 0")
]


def enum(choices: tuple[str, ...]) -> Any:
    """Metadata: publish ``choices`` as the field's JSON Schema enum."""
    return Field(json_schema_extra={"enum": list(choices)})


def member_of(choices: tuple[str, ...]) -> AfterValidator:
    """Metadata: the value is one of ``choices``."""

    def check(value: str) -> str:
        if value not in choices:
            raise ValueError(value)
        return value

    return AfterValidator(check)


def choices_text(choices: tuple[str, ...]) -> str:
    return ", ".join(repr(c) for c in choices)


def safe(message: str, pattern: str | None = None) -> WrapValidator:
    """File rule: the value matches ``pattern`` (when given) and holds no shell syntax."""
    check = _matches(pattern, message) if pattern else (lambda v: None)

    def both(v: Any) -> str | None:
        return check(v) or (shell_problem(v) if isinstance(v, str) else None)

    return judged(both)


def pairs(adapter: TypeAdapter[dict[Any, Any]], *, drop_null: bool = False) -> WrapValidator:
    """A mapping in the file (``{KEY: value}``), a sorted tuple of pairs in the model, so
    that the resolved profile (and its hash) ignores key order. Problems name the key.
    ``drop_null``: ``KEY: null`` removes an inherited entry (``server.env``)."""

    def wrap(value: Any, handler: Callable[[Any], Any], info: ValidationInfo) -> Any:
        if isinstance(value, dict):
            items = {k: v for k, v in value.items() if not (drop_null and v is None)}
            checked = adapter.validate_python(items, context=info.context)
            return handler(tuple(sorted(checked.items())))
        if from_file(info):
            raise problem("must be a mapping")
        return handler(value)  # pairs: a stored or hand-built profile

    return WrapValidator(wrap)


def mapping_schema(
    adapter: TypeAdapter[dict[Any, Any]], *, drop_null: bool = False
) -> WithJsonSchema:
    """How a pair field looks in a file: a JSON object, integer keys spelt in digits as
    JSON writes them, and ``null`` values where they remove an inherited entry."""
    schema = adapter.json_schema()
    schema.pop("title", None)
    if "patternProperties" in schema:  # keys with a pattern: nothing else
        schema["additionalProperties"] = False
    else:
        schema["propertyNames"] = {"pattern": "^[1-9][0-9]*$"}
    if drop_null:
        values = schema["patternProperties"]
        for key, value in values.items():
            values[key] = {"anyOf": [value, {"type": "null"}]}
    return WithJsonSchema(schema)


GPUS_MESSAGE = "must be 'all' or a list of distinct GPU indices, e.g. [0, 1] ([] for no GPUs)"


def _gpus(value: Any, handler: Callable[[Any], Any]) -> Any:
    if value == "all":
        return "all"
    if isinstance(value, (list, tuple)):
        indices = [v for v in value if isinstance(v, int) and not isinstance(v, bool) and v >= 0]
        if len(indices) == len(value) == len(set(indices)):
            return tuple(indices)
    raise problem(GPUS_MESSAGE)


gpus_rule = WrapValidator(_gpus)
gpus_schema = WithJsonSchema(
    {
        "anyOf": [
            {"const": "all"},
            {"type": "array", "items": {"type": "integer", "minimum": 0}, "uniqueItems": True},
        ]
    }
)

#: one problem found by a section's own cross-field rules: (path, message, value)
Found = tuple[tuple[str | int, ...], str, Any]


def report(title: str, found: list[Found]) -> None:
    """Raise every problem in ``found`` at once, each at its own path."""
    if found:
        raise ValidationError.from_exception_data(
            title,
            [
                InitErrorDetails(type=problem(msg), loc=loc, input=value)
                for loc, msg, value in found
            ],
        )


def _climbs(value: str) -> bool:
    return ".." in value.split("/")


def normal_path(value: str) -> str:
    """``value`` with repeated slashes, ``.`` segments and a trailing slash removed (a
    relative path stays relative). A path with ``..`` is refused rather than normalized:
    what ``..`` climbs out of depends on the file system (a symlink before it); the form
    returned for one only suggests what it may mean."""
    out = posixpath.normpath(re.sub("/+", "/", value))
    return value if not value else out


def _path_problem(value: str) -> str | None:
    if not _climbs(value):
        return None
    meant = normal_path(value)
    return (
        f"contains '..'; write the path itself, without '..' (here {meant!r}, if that is "
        "what is meant), so that the profile shows what kctl uses"
    )


def _clean_path(value: Any, handler: Callable[[Any], Any], info: ValidationInfo) -> Any:
    out = handler(value)
    if from_file(info) and isinstance(out, str):
        message = _path_problem(out)
        if message is not None:
            raise problem(message)
        return normal_path(out)
    return out


#: file rule, last in a path field's metadata: ``..`` refused, the path normalized
#: (``/models//x/`` -> ``/models/x``), so what is mounted, read or hashed is what shows
clean_path = WrapValidator(_clean_path)


def repo_dir_problem(value: str) -> str | None:
    """Why ``value`` is not a directory inside the repository, or None."""
    if value.startswith("/") or _climbs(value):
        return (
            "must stay inside the repository: a path relative to its root, without '..', "
            "e.g. 'kernels'"
        )
    if not re.match(REPO_PATH_PATTERN, value):
        return "must be a plain relative directory (letters, digits, '.', '_', '-', '/')"
    return None
