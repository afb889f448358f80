"""Permissive stand-ins for the heavy packages SGLang imports at module level.

The release table is read from SGLang's own ``ServerArgs`` parser, built by importing the
wheel's ``server_args`` module. That module imports torch, transformers, triton and many
more at import time, none of which the parser needs. :class:`StubFinder` answers every
such import with a module whose every attribute is a :class:`Stub`: a class that can be
called, subclassed, subscripted, iterated, compared and used as a decorator or a context
manager, and that is falsy (so ``if is_cuda():`` takes the plain branch).

Only the standard library, the wheel's own ``sglang`` package and the few light packages
named in :data:`REAL_PACKAGES` are imported for real, whatever else is installed, so the
table is the same on every machine.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
import typing
from collections.abc import Iterator, Sequence
from typing import Any

#: Packages imported for real: the parser is built with them (``msgspec.Struct`` records
#: carry the defaults and ``Annotated`` metadata that 0.5.20 and later derive flags from).
REAL_PACKAGES = frozenset({"msgspec"})


#: Dunder names a stub does not have: protocols that look for them must see them absent.
_ABSENT = frozenset(
    {
        "__wrapped__",
        "__signature__",
        "__origin__",
        "__args__",
        "__parameters__",
        "__mro_entries__",
        "__set_name__",
        "__get__",
        "__set__",
        "__delete__",
        "__path__",
        "__file__",
        "__loader__",
        "__spec__",
        "__all__",
        "__dataclass_fields__",
        "__struct_fields__",
        "__fspath__",
        "__await__",
        "__supertype__",
        "__typing_is_unpacked_typevartuple__",
        "__typing_subst__",
        "__pydantic_core_schema__",
    }
)


class StubMeta(type):
    """Metaclass of every stub: the class object itself answers any use."""

    def __getattr__(cls, name: str) -> Any:
        if name in _ABSENT:
            raise AttributeError(name)
        return make_stub(f"{cls.__qualname__}.{name}")

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        # A stub used as a decorator returns what it decorates.
        if len(args) == 1 and not kwargs and (callable(args[0]) or isinstance(args[0], type)):
            return args[0]
        return make_stub(f"{cls.__qualname__}()")

    def __getitem__(cls, key: Any) -> Any:
        return cls

    def __setitem__(cls, key: Any, value: Any) -> None:
        return None

    def __contains__(cls, item: Any) -> bool:
        return False

    def __iter__(cls) -> Iterator[Any]:
        return iter(())

    def __len__(cls) -> int:
        return 0

    def __bool__(cls) -> bool:
        return False

    def __int__(cls) -> int:
        return 0

    def __index__(cls) -> int:
        return 0

    def __float__(cls) -> float:
        return 0.0

    def __or__(cls, other: Any) -> Any:
        return cls

    def __ror__(cls, other: Any) -> Any:
        return cls

    def __lt__(cls, other: Any) -> bool:
        return False

    def __le__(cls, other: Any) -> bool:
        return False

    def __gt__(cls, other: Any) -> bool:
        return False

    def __ge__(cls, other: Any) -> bool:
        return False

    def __enter__(cls) -> Any:
        return cls

    def __exit__(cls, *exc: object) -> None:
        return None

    def __repr__(cls) -> str:
        return f"<stub {cls.__qualname__}>"

    __hash__ = type.__hash__


class Stub(metaclass=StubMeta):
    """Base of every stub class; instances of subclasses are ordinary objects."""


def make_stub(qualname: str) -> Any:
    """A new stub class named ``qualname`` (its name shows in reprs and tracebacks)."""
    return StubMeta(qualname.rsplit(".", 1)[-1], (Stub,), {"__qualname__": qualname})


class StubModule(types.ModuleType):
    """A module whose every attribute is a stub; a package, so submodules import."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__path__: list[str] = []
        self.__all__: list[str] = []
        self.__version__ = "0.0.0"

    def __getattr__(self, name: str) -> Any:
        if name in _ABSENT:
            raise AttributeError(name)
        value = (
            getattr(typing, name)
            if self.__name__ == "typing_extensions" and hasattr(typing, name)
            else make_stub(f"{self.__name__}.{name}")
        )
        setattr(self, name, value)
        return value


class DegradedModule(StubModule):
    """An own module whose execution failed: what it defined before the failure keeps
    its real value, every other attribute is a stub."""


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return StubModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _TolerantLoader(importlib.abc.Loader):
    """Runs an own module for real; a failure degrades it instead of failing the import."""

    def __init__(self, real: importlib.abc.Loader, failed: dict[str, str]) -> None:
        self.real = real
        self.failed = failed

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.real.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        try:
            self.real.exec_module(module)
        except Exception as exc:  # any failure: the module's remaining names become stubs
            self.failed[module.__name__] = f"{type(exc).__name__}: {exc}"
            module.__class__ = DegradedModule


class StubFinder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: stubs every module outside the standard library,
    the ``own`` packages (found on ``sys.path``) and :data:`REAL_PACKAGES`. An own module
    that cannot be found (a compiled extension) is stubbed too; one that fails while it
    runs is degraded (:class:`DegradedModule`) and named in :attr:`failed`."""

    def __init__(self, own: Sequence[str]) -> None:
        self.own = frozenset(own)
        self.stubbed: set[str] = set()
        self.failed: dict[str, str] = {}

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        top = fullname.partition(".")[0]
        if top in sys.stdlib_module_names or top in REAL_PACKAGES:
            return None
        if top in self.own:
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is not None and spec.loader is not None:
                spec.loader = _TolerantLoader(spec.loader, self.failed)
                return spec
            if spec is not None:  # a namespace package
                return spec
        self.stubbed.add(fullname if top in self.own else top)
        return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)
