"""SGLang releases as kctl knows them: one model, read from ``data/releases.json``.

The table is written by ``python -m kctl.sglang.generate`` from the published wheels
(every release from 0.5.9 on); nothing in it is typed by hand. Per release it holds the
server's argument parser (every option string, its dest, nargs, type, choices, default,
deprecation), the launcher, the hooks kctl's kernel attaches through, and the
speculative-decoding fields a response's ``meta_info`` carries.

    rel = release("0.5.23")
    rel.parser()                       # an argparse parser equal in what it accepts
    rel.cuda_graph_max_bs_argv(48)     # ["--cuda-graph-max-bs-decode", "48"]
    rel.hooks.graph_hooks              # "out_in_graph"
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal

from kctl.errors import InvalidInput
from kctl.sglang._rebuild import Option, ParserError, build_parser

__all__ = [
    "NO_HOOKS",
    "Hooks",
    "Launcher",
    "Option",
    "ParserError",
    "Release",
    "TritonMethod",
    "UnknownRelease",
    "known_versions",
    "load_table",
    "newest",
    "release",
    "release_from_probe",
    "releases",
    "version_key",
]

_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?$")


class UnknownRelease(InvalidInput):
    """A version kctl has no table for (exit 2)."""


def version_key(version: str) -> tuple[int, int, int, int]:
    """Sort key of ``0.5.10`` / ``0.5.10.post1`` (``.postN`` sorts after its release)."""
    m = _VERSION.match(version.strip())
    if m is None:
        raise UnknownRelease(
            f"not an SGLang release version: {version!r}",
            hint="write it as MAJOR.MINOR.PATCH or MAJOR.MINOR.PATCH.postN, e.g. 0.5.10.post1",
        )
    major, minor, patch, post = m.groups()
    return (int(major), int(minor), int(patch), int(post or -1))


@dataclass(frozen=True)
class TritonMethod:
    defined_in: str
    params: tuple[str, ...]


@dataclass(frozen=True)
class Hooks:
    """Where kctl's kernel can attach in a release (read from the wheel's source)."""

    triton_class: str | None
    triton_methods: Mapping[str, TritonMethod]
    model_runner: tuple[str, ...]
    extend_attention_module: str | None
    extend_attention_params: tuple[str, ...]
    plugins: bool
    plugin_groups: tuple[str, ...]
    register_attention_backend: bool
    add_attention_backend_choices: str | None

    @property
    def graph_hooks(self) -> Literal["capture_replay", "out_in_graph", "none"]:
        """Which CUDA-graph metadata hooks the Triton backend has:
        ``init_forward_metadata_capture_cuda_graph``/``..._replay_...`` (up to 0.5.12)
        or ``init_forward_metadata_out_graph``/``..._in_graph`` (0.5.13 on)."""
        methods = self.triton_methods
        if "init_forward_metadata_capture_cuda_graph" in methods:
            return "capture_replay"
        if "init_forward_metadata_out_graph" in methods:
            return "out_in_graph"
        return "none"

    @property
    def has_plugin_entry_points(self) -> bool:
        """Whether the release discovers ``sglang.srt.plugins`` entry points."""
        return self.plugins and "sglang.srt.plugins" in self.plugin_groups


@dataclass(frozen=True)
class Launcher:
    argv: tuple[str, ...]
    serve_subcommand: bool
    launch_server_module: bool


@dataclass(frozen=True)
class Release:
    """One SGLang release: its server parser, launcher, hooks and metric names."""

    version: str
    wheel: str
    sha256: str
    allow_abbrev: bool
    prefix_chars: str
    fromfile_prefix_chars: str | None
    options: tuple[Option, ...]
    launcher: Launcher
    hooks: Hooks
    spec_metrics: tuple[str, ...]
    degraded_modules: tuple[str, ...]
    #: "table": from the committed table; "image": the parser an image described itself
    source: Literal["table", "image"] = "table"
    _by_flag: Mapping[str, Option] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        index = {flag: opt for opt in self.options for flag in opt.options}
        object.__setattr__(self, "_by_flag", index)

    @property
    def key(self) -> tuple[int, int, int, int]:
        return version_key(self.version)

    def option(self, flag: str) -> Option | None:
        """The option spelled exactly ``flag`` (no abbreviation), or None."""
        return self._by_flag.get(flag)

    def has(self, flag: str) -> bool:
        return flag in self._by_flag

    @property
    def flags(self) -> frozenset[str]:
        return frozenset(self._by_flag)

    def by_dest(self, dest: str) -> tuple[Option, ...]:
        """Every option that stores into ``dest`` (a flag, its aliases, deprecated ones)."""
        return tuple(o for o in self.options if o.dest == dest)

    def dest_of(self, flag: str) -> str | None:
        opt = self.option(flag)
        return None if opt is None else opt.dest

    def choices(self, flag: str) -> tuple[Any, ...] | None:
        opt = self.option(flag)
        return None if opt is None else opt.choices

    @property
    def attention_backends(self) -> tuple[str, ...]:
        """``--attention-backend`` choices built in to the release (plugins add more)."""
        return tuple(self.choices("--attention-backend") or ())

    @property
    def kv_cache_dtypes(self) -> tuple[str, ...]:
        return tuple(self.choices("--kv-cache-dtype") or ())

    def spelling(self, *candidates: str) -> str:
        """The first of ``candidates`` the release has and does not deprecate; else the
        first it has at all. ``KeyError`` if it has none."""
        present = [c for c in candidates if self.has(c)]
        current = [c for c in present if not self._by_flag[c].deprecated]
        if not present:
            raise KeyError(f"SGLang {self.version} has none of {', '.join(candidates)}")
        return (current or present)[0]

    def cuda_graph_max_bs_argv(self, n: int) -> list[str]:
        """Largest batch size captured in decode CUDA graphs, in this release's spelling:
        ``--cuda-graph-max-bs-decode`` (0.5.14 on) or ``--cuda-graph-max-bs``."""
        return [self.spelling("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"), str(n)]

    def disable_cuda_graph_argv(self) -> list[str]:
        """No CUDA graphs, without a deprecated flag: ``--cuda-graph-backend-decode
        disabled --cuda-graph-backend-prefill disabled`` where the release has them
        (0.5.14 on), else ``--disable-cuda-graph``."""
        pair = ("--cuda-graph-backend-decode", "--cuda-graph-backend-prefill")
        if all("disabled" in (self.choices(f) or ()) for f in pair):
            return [pair[0], "disabled", pair[1], "disabled"]
        return [self.spelling("--disable-cuda-graph")]

    def launch_argv(self, server_args: Sequence[str]) -> list[str]:
        """The container command: the release's launcher, then the server arguments."""
        return [*self.launcher.argv, *server_args]

    @property
    def acceptance_length_field(self) -> str | None:
        """The ``meta_info`` field with a request's mean speculative acceptance length."""
        return "spec_accept_length" if "spec_accept_length" in self.spec_metrics else None

    def parser(
        self, extra_choices: Mapping[str, Iterable[str]] | None = None
    ) -> argparse.ArgumentParser:
        """An argparse parser that accepts what the release's ``ServerArgs`` parser
        accepts: the same option strings and aliases, nargs, choices, ``allow_abbrev``.
        ``extra_choices`` adds choices by dest (an attention backend a plugin registers).
        Errors raise :class:`ParserError` instead of exiting. Values of options whose type
        is a release function are kept as strings."""
        return build_parser(
            self.options,
            prog=" ".join(self.launcher.argv),
            allow_abbrev=self.allow_abbrev,
            prefix_chars=self.prefix_chars,
            fromfile_prefix_chars=self.fromfile_prefix_chars,
            extra_choices=dict(extra_choices or {}),
        )


def _option(raw: Mapping[str, Any]) -> Option:
    choices = raw["choices"]
    return Option(
        options=tuple(raw["options"]),
        dest=raw["dest"],
        kind=raw["kind"],
        nargs=raw["nargs"],
        type=raw["type"],
        choices=None if choices is None else tuple(choices),
        default=raw["default"],
        const=raw["const"],
        required=raw["required"],
        deprecated=raw["deprecated"],
        hidden=raw["hidden"],
        action=raw.get("action"),
    )


def _hooks(raw: Mapping[str, Any]) -> Hooks:
    triton = raw["triton_backend"]
    extend = raw["extend_attention_fwd"] or {}
    return Hooks(
        triton_class=triton["class"],
        triton_methods={
            name: TritonMethod(m["defined_in"], tuple(m["params"]))
            for name, m in triton["methods"].items()
        },
        model_runner=tuple(raw["model_runner"]),
        extend_attention_module=extend.get("module"),
        extend_attention_params=tuple(extend.get("params") or ()),
        plugins=raw["plugins"]["package"],
        plugin_groups=tuple(raw["plugins"]["entry_point_groups"]),
        register_attention_backend=raw["attention_registry"]["register_attention_backend"],
        add_attention_backend_choices=raw["attention_registry"]["add_attention_backend_choices"],
    )


def _release(raw: Mapping[str, Any], options: Sequence[Option]) -> Release:
    parser = raw["parser"]
    launcher = raw["launcher"]
    return Release(
        version=raw["version"],
        wheel=raw["wheel"],
        sha256=raw["sha256"],
        allow_abbrev=parser["allow_abbrev"],
        prefix_chars=parser["prefix_chars"],
        fromfile_prefix_chars=parser["fromfile_prefix_chars"],
        options=tuple(options[i] for i in parser["actions"]),
        launcher=Launcher(
            argv=tuple(launcher["argv"]),
            serve_subcommand=launcher["serve_subcommand"],
            launch_server_module=launcher["launch_server_module"],
        ),
        hooks=_hooks(raw["hooks"]),
        spec_metrics=tuple(raw["spec_metrics"]),
        degraded_modules=tuple(raw["degraded_modules"]),
    )


def load_table(text: str) -> tuple[Release, ...]:
    """Every release in a table's text, oldest first."""
    data = json.loads(text)
    options = [_option(o) for o in data["options"]]
    out = [_release(r, options) for r in data["releases"]]
    return tuple(sorted(out, key=lambda r: r.key))


@functools.cache
def releases() -> tuple[Release, ...]:
    """Every release kctl knows, oldest first (read once from the package's data)."""
    text = resources.files("kctl.sglang").joinpath("data/releases.json").read_text("utf-8")
    return load_table(text)


def known_versions() -> tuple[str, ...]:
    return tuple(r.version for r in releases())


def newest() -> Release:
    return releases()[-1]


#: hooks of a release kctl has no table for: none known (the kernel checks at startup)
NO_HOOKS = Hooks(None, {}, (), None, (), False, (), False, None)


def release_from_probe(text: str) -> Release:
    """The release an image describes with :mod:`kctl.sglang.probe` (its JSON output).

    The parser is the image's own. A version the table knows keeps the table's launcher,
    hooks and metric names; a newer one gets the launcher the image reports and no hooks
    or metric names (:data:`NO_HOOKS`). ``ValueError`` if ``text`` is not a probe's
    output."""
    try:
        data = json.loads(text)
        version, parser, launcher = data["version"], data["parser"], data["launcher"]
        options = tuple(_option(a) for a in parser["actions"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"not the output of kctl.sglang.probe: {exc}") from exc
    settings = {
        "allow_abbrev": parser["allow_abbrev"],
        "prefix_chars": parser["prefix_chars"],
        "fromfile_prefix_chars": parser["fromfile_prefix_chars"],
    }
    try:
        known = release(version)
    except UnknownRelease:
        return Release(
            version=version,
            wheel="",
            sha256="",
            options=options,
            launcher=Launcher(
                tuple(launcher["argv"]),
                launcher["serve_subcommand"],
                launcher["launch_server_module"],
            ),
            hooks=NO_HOOKS,
            spec_metrics=(),
            degraded_modules=(),
            source="image",
            **settings,
        )
    return dataclasses.replace(known, options=options, source="image", **settings)


def release(version: str) -> Release:
    """The release ``version`` (``0.5.10``, ``0.5.10.post1``, ``v0.5.23``).

    Raises :class:`UnknownRelease` naming the known range if kctl has no table for it."""
    key = version_key(version)
    for rel in releases():
        if rel.key == key:
            return rel
    known = known_versions()
    raise UnknownRelease(
        f"SGLang {version.strip()} is not a release kctl knows "
        f"(known: {known[0]} to {known[-1]}, {len(known)} releases)",
        hint="use an image with a known release, or regenerate the table: "
        "python -m kctl.sglang.generate",
    )
