"""A profile's SGLang server arguments and their check by its release's own parser.
Pure functions; the loader checks every profile file with :func:`argv_problems`, and
:mod:`kctl.launch` puts :func:`server_args` into the :class:`~kctl.runtime.base.LaunchSpec`
a runtime acts on.

Flag spellings follow the profile's SGLang release
(:func:`kctl.profile.release.profile_release`, from the release table).
"""

from __future__ import annotations

import dataclasses

from kctl.profile.model import Profile, ServerSpec
from kctl.profile.release import DEFAULT_VERSION, profile_release
from kctl.profile.rules import MANAGED_FLAGS, SETTING_FIXES, Found
from kctl.profile.secretnames import Hidden
from kctl.profile.validate import format_path
from kctl.sglang.argv import check_argv
from kctl.sglang.kernel_support import FP8_MLA_SINCE, KDTREE_BACKEND, kernel_choices, reads_fp8_mla
from kctl.sglang.releases import Release, release

#: the env var SGLang's plugin framework filters entry points by (comma-separated names)
PLUGINS_ENV = "SGLANG_PLUGINS"
#: the name of the kdtree kernel's plugin entry point (kernels/pyproject.toml)
KDTREE_PLUGIN = "kdtree"


def flag_number(value: float) -> str:
    """Numbers as a user would type them: 50.0 -> '50', 0.85 -> '0.85'."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


#: one rendered token and the profile field it comes from
_Token = tuple[str, tuple[str | int, ...]]


def _rendered(server: ServerSpec, rel: Release) -> list[_Token]:
    """The launch arguments with the field path of each token (for problem lines)."""
    out: list[_Token] = []

    def add(path: tuple[str | int, ...], *tokens: str) -> None:
        out.extend((t, ("server", *path)) for t in tokens)

    add(("model_path",), "--model-path", server.model_path)
    if server.served_model_name:
        add(("served_model_name",), "--served-model-name", server.served_model_name)
    add(("host",), "--host", server.host)
    add(("port",), "--port", str(server.port))
    add(("tp",), "--tp-size", str(server.tp))
    add(("attention_backend",), "--attention-backend", server.attention_backend)
    if server.attention_backend == KDTREE_BACKEND:
        # SGLang's draft-model backend factories have no kdtree entry: the draft runs on
        # Triton, as in the triton baseline (docs/sglang-integration.md)
        add(("attention_backend",), "--speculative-draft-attention-backend", "triton")
    if not server.cuda_graphs:
        add(("cuda_graphs",), *rel.disable_cuda_graph_argv())
    elif server.cuda_graph_max_bs is not None:
        # only meaningful with graphs; an eager profile may inherit it from a shared base
        add(("cuda_graph_max_bs",), *rel.cuda_graph_max_bs_argv(server.cuda_graph_max_bs))
    if server.mem_fraction_static is not None:
        add(
            ("mem_fraction_static",),
            "--mem-fraction-static",
            flag_number(server.mem_fraction_static),
        )
    if server.trust_remote_code:
        add(("trust_remote_code",), "--trust-remote-code")
    add(("kv_cache_dtype",), "--kv-cache-dtype", server.kv_cache_dtype)
    spec = server.speculative
    if spec is not None:
        add(("speculative", "algorithm"), "--speculative-algorithm", spec.algorithm)
        if spec.draft_model_path is not None:
            add(
                ("speculative", "draft_model_path"),
                "--speculative-draft-model-path",
                spec.draft_model_path,
            )
        add(("speculative", "num_steps"), "--speculative-num-steps", str(spec.num_steps))
        add(("speculative", "eagle_topk"), "--speculative-eagle-topk", str(spec.eagle_topk))
        add(
            ("speculative", "num_draft_tokens"),
            "--speculative-num-draft-tokens",
            str(spec.num_draft_tokens),
        )
    for i, arg in enumerate(server.extra_args):
        add(("extra_args", i), arg)
    return out


def server_args(server: ServerSpec, rel: Release | None = None) -> tuple[str, ...]:
    """The SGLang server arguments for ``server`` as release ``rel`` spells them (default:
    :data:`~kctl.profile.release.DEFAULT_VERSION`), in a fixed order, with ``extra_args``
    last so they may add anything kctl does not model."""
    rel = rel or release(DEFAULT_VERSION)
    return tuple(token for token, _ in _rendered(server, rel))


def _kernel_path_problems(profile: Profile, rel: Release) -> list[Found]:
    """The kdtree kernel's startup hook serves releases without plugin entry points only:
    from 0.5.11 it declines, and the kernel is selected as ``attention_backend: kdtree``.
    An fp8 KV cache reaches the kernel only where the release's own Triton MLA path reads
    one (:data:`~kctl.sglang.kernel_support.FP8_MLA_SINCE`); elsewhere the kernel declines."""
    server = profile.server
    found: list[Found] = []
    if server.verify_kernel != "kdtree":
        return found
    if server.attention_backend == "triton" and kernel_choices(rel):
        found.append(
            (
                ("server", "attention_backend"),
                f"SGLang {rel.version} loads the kdtree kernel as a plugin attention backend "
                "(its startup hook declines from 0.5.11 on); fix: set "
                "server.attention_backend: kdtree and remove server.env.KDTREE_VERIFY",
                server.attention_backend,
            )
        )
    if server.kv_cache_dtype.startswith("fp8") and not reads_fp8_mla(rel):
        found.append(
            (
                ("server", "kv_cache_dtype"),
                f"SGLang {rel.version}'s Triton MLA path does not read an fp8 KV cache, so "
                f"the kdtree kernel would decline it; fix: kv_cache_dtype: bf16, or an image "
                f"with SGLang {FP8_MLA_SINCE} or later (image.sglang)",
                server.kv_cache_dtype,
            )
        )
    found += _plugin_env_problems(server)
    return found


def _plugin_env_problems(server: ServerSpec) -> list[Found]:
    """``SGLANG_PLUGINS``, when set, is the list of plugins SGLang loads: one that leaves
    out the kernel's makes SGLang skip it, and ``--attention-backend kdtree`` then fails at
    start (or, with a plugin of that name elsewhere, serves something else)."""
    raw = server.env_dict().get(PLUGINS_ENV)
    if server.attention_backend != KDTREE_BACKEND or not raw:
        return []
    if KDTREE_PLUGIN in {name.strip() for name in raw.split(",") if name.strip()}:
        return []
    return [
        (
            ("server", "env", PLUGINS_ENV),
            f"{PLUGINS_ENV} lists the plugins SGLang loads, and {raw!r} leaves out the kdtree "
            "kernel's: SGLang would skip it and --attention-backend kdtree would fail at start "
            f"(server.attention_backend); fix: remove server.env.{PLUGINS_ENV}, or list "
            f"{KDTREE_PLUGIN} in it",
            raw,
        )
    ]


def api_key_fix() -> str:
    """Where the API key goes instead of ``extra_args``: the profile's secret reference
    where the profile has one."""
    if "api_key" in {f.name for f in dataclasses.fields(ServerSpec)}:
        return "remove it from extra_args and set the profile's `server.api_key` secret reference"
    return "remove it from extra_args: give the API key as a secret reference, not extra_args"


def setting_fixes() -> dict[str, str]:
    """Every setting an extra argument must not change, by any flag, and its fix."""
    return {**SETTING_FIXES, "api_key": api_key_fix()}


def _field_value(profile: Profile, path: tuple[str | int, ...]) -> object:
    node: object = profile
    for part in path:
        node = node[part] if isinstance(part, int) else getattr(node, part)  # type: ignore[index]
    return node


def _located(
    profile: Profile, tokens: list[_Token], own: int, index: int | None
) -> tuple[tuple[str | int, ...], object]:
    """The field a problem at argv ``index`` belongs to, and the value to show: the
    field's own value for a token kctl rendered, the item itself for an extra arg."""
    if index is None or index >= len(tokens):
        return ("server", "extra_args"), list(profile.server.extra_args)
    path = tokens[index][1]
    return path, (_field_value(profile, path) if index < own else tokens[index][0])


def argv_findings(profile: Profile, rel: Release | None = None) -> tuple[list[Found], list[Found]]:
    """``(errors, warnings)`` of the server parser of the profile's release (or ``rel``) on
    the profile's launch argv, each as ``(field path, message with the fix, value)``.
    Errors: unknown or removed flags, values outside the choices, any ``extra_args``
    item that reaches a flag kctl manages (by alias, abbreviation or ``--config``), and
    any that changes a setting kctl manages through another flag (:func:`setting_fixes`:
    CUDA graphs by ``--cuda-graph-config``, the decode backend, the tokenizer, ...).
    Warnings: a deprecated flag the release still accepts, with its replacement."""
    rel = rel or profile_release(profile)
    tokens = _rendered(profile.server, rel)
    argv = [t for t, _ in tokens]
    own = len(argv) - len(profile.server.extra_args)
    flags = dict(MANAGED_FLAGS)
    if profile.server.attention_backend == KDTREE_BACKEND:
        flags["--speculative-draft-attention-backend"] = "server.attention_backend (kdtree)"
    managed = {
        dest: f"set {field} instead"
        for flag, field in flags.items()
        if (dest := rel.dest_of(flag)) is not None
    }
    errors, warnings = _kernel_path_problems(profile, rel), list[Found]()
    for p in check_argv(
        rel, argv, managed, own=own, extra_choices=kernel_choices(rel), settings=setting_fixes()
    ):
        path, value = _located(profile, tokens, own, p.index)
        if "api key" in p.message.lower().replace("_", " "):
            value = Hidden()  # the key itself may be in the item, or the next one
        message = p.message if p.message.startswith(p.flag) else f"{p.flag}: {p.message}"
        if "SGLang" not in message:
            message = f"SGLang {rel.version}: {message}"
        found = (path, f"{message}; fix: {p.fix}", value)
        (errors if p.severity == "error" else warnings).append(found)
    return errors, warnings


def argv_problems(profile: Profile, rel: Release | None = None) -> list[Found]:
    """The errors of :func:`argv_findings` (what the release's parser refuses)."""
    return argv_findings(profile, rel)[0]


def argv_warnings(profile: Profile, rel: Release | None = None) -> list[str]:
    """The warnings of :func:`argv_findings` as lines: ``<field>: <message>; fix: ...``."""
    return [
        f"{format_path(path)}: {msg} (got {value!r})"
        for path, msg, value in argv_findings(profile, rel)[1]
    ]
