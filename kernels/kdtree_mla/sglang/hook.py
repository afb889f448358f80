"""Post-import hook: patch SGLang modules right after they are first imported.

The hook is a :class:`importlib.abc.MetaPathFinder` placed first on ``sys.meta_path``. For the
few module names it watches it asks the other finders for the real spec and wraps the spec's
loader so that, once the module's code has run, a callback patches it. Every other import is
untouched, and each callback fires once and is then forgotten, so after SGLang has loaded the
finder costs one dict lookup per import.

Watched modules:

* ``sglang``: read SGLang's version; an unsupported version prints the decline line and the
  hook stops (SGLang stays untouched).
* ``sglang.srt.layers.attention.triton_backend``: patch ``TritonAttnBackend`` (:mod:`.patch`).
* ``sglang.srt.model_executor.model_runner``: after the target model's attention backend is
  built, print a decline line if no Triton backend took the decision (another backend serves
  target verify).

A callback that raises never propagates: the module stays as SGLang wrote it and the failure is
printed as a decline line.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from kdtree_mla.sglang import announce
from kdtree_mla.sglang.loglines import UNKNOWN_VERSION
from kdtree_mla.sglang.versions import (
    SglangLayout,
    installed_version,
    layout_for,
    unsupported_reason,
)

TOP = "sglang"
TRITON_BACKEND = "sglang.srt.layers.attention.triton_backend"
MODEL_RUNNER = "sglang.srt.model_executor.model_runner"

Callback = Callable[[ModuleType], None]


class PostImportFinder(importlib.abc.MetaPathFinder):
    """Runs ``callbacks[name](module)`` right after module ``name`` is first executed."""

    def __init__(self, callbacks: dict[str, Callback]) -> None:
        self.callbacks = dict(callbacks)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        callback = self.callbacks.get(fullname)
        if callback is None:
            return None
        spec = self._real_spec(fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        # The callback is forgotten only once the module has run: a bare find_spec() probe
        # ("is sglang installed?") must not use it up.
        spec.loader = _CallbackLoader(spec.loader, self._once(fullname, callback))
        return spec

    def _once(self, fullname: str, callback: Callback) -> Callback:
        def run(module: ModuleType) -> None:
            if self.callbacks.pop(fullname, None) is not None:
                callback(module)

        return run

    def _real_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None
    ) -> importlib.machinery.ModuleSpec | None:
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                return spec  # type: ignore[no-any-return]
        return None


class _CallbackLoader(importlib.abc.Loader):
    """Delegates to the real loader, then runs the callback on the executed module."""

    def __init__(self, loader: Any, callback: Callback) -> None:
        self._loader = loader
        self._callback = callback

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _run_guarded(self._callback, module)

    def __getattr__(self, name: str) -> Any:
        # get_source, get_filename, is_package ... keep working for tracebacks and inspect.
        return getattr(self._loader, name)


class SglangHook:
    """The hook's state in one process: the finder, and SGLang's version once it is known."""

    def __init__(self) -> None:
        self.layout: SglangLayout | None = None
        self.version: str = UNKNOWN_VERSION
        self._resolved = False
        self.finder = PostImportFinder(
            {
                TOP: self._on_sglang,
                TRITON_BACKEND: self._on_triton_backend,
                MODEL_RUNNER: self._on_model_runner,
            }
        )

    def install(self) -> None:
        """Put the finder first on ``sys.meta_path``; patch modules that are already imported."""
        if self.finder not in sys.meta_path:
            sys.meta_path.insert(0, self.finder)
        for name in (TOP, TRITON_BACKEND, MODEL_RUNNER):
            module = sys.modules.get(name)
            if module is None or name not in self.finder.callbacks:
                continue
            _run_guarded(self.finder.callbacks.pop(name), module)

    def uninstall(self) -> None:
        """Remove the finder; modules already patched stay patched."""
        if self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)

    def resolve(self) -> SglangLayout | None:
        """SGLang's layout, read once on the first watched import; None when declined.

        Lazy because SGLang's package ``__init__`` may import the other watched modules before
        its own callback runs.
        """
        if self._resolved:
            return self.layout
        self._resolved = True
        version = installed_version()
        self.version = version or UNKNOWN_VERSION
        self.layout = layout_for(version)
        if self.layout is None:
            self.finder.callbacks.clear()
            self.uninstall()
            announce.declined(unsupported_reason(version), self.version)
        return self.layout

    def _on_sglang(self, module: ModuleType) -> None:
        self.resolve()

    def _on_triton_backend(self, module: ModuleType) -> None:
        layout = self.resolve()
        if layout is None:
            return
        from kdtree_mla.sglang import patch

        try:
            patch.patch_triton_backend(module, layout, self.version)
        except Exception as exc:
            announce.declined(f"cannot patch {TRITON_BACKEND}: {exc}", self.version)

    def _on_model_runner(self, module: ModuleType) -> None:
        if self.resolve() is None:
            return
        from kdtree_mla.sglang import patch

        try:
            patch.patch_model_runner(module, self.version)
        except Exception as exc:
            announce.declined(f"cannot patch {MODEL_RUNNER}: {exc}", self.version)


def _run_guarded(callback: Callback, module: ModuleType) -> None:
    try:
        callback(module)
    except Exception as exc:  # the server must come up on SGLang's own code
        announce.declined(f"integration error: {type(exc).__name__}: {exc}", UNKNOWN_VERSION)


_HOOK: SglangHook | None = None


def install_hook() -> SglangHook:
    """Install the process's one hook (idempotent) and return it."""
    global _HOOK
    if _HOOK is None:
        _HOOK = SglangHook()
    _HOOK.install()
    return _HOOK


def current_hook() -> SglangHook | None:
    """The hook installed in this process, if any."""
    return _HOOK
