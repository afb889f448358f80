"""Read one profile file into plain data, within bounds: a size limit checked before
parsing, UTF-8 only, YAML that names the line and column of a mistake, no duplicate keys,
and a limit on nesting and on how far anchors and aliases expand.

Why the alias limit: YAML aliases share one node, so a few hundred bytes can describe a
value with billions of items (``a: &a [x, x]``, ``b: &b [*a, *a]``, ...). Parsing such a
file is cheap; anything that walks the result (validation, an error message quoting it) is
not. So the composed node graph is measured as it would expand, and refused beyond
:data:`MAX_NODES`, before one Python object is built. Profiles use anchors legitimately
(``x-`` keys hold them), so aliases stay allowed within the limit.
"""

from __future__ import annotations

import os
import stat
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from kctl.errors import InvalidInput
from kctl.profile.validate import format_path

#: a profile is a few KB; refuse anything larger before reading it
MAX_BYTES = 1024 * 1024
#: YAML values in a profile once aliases are expanded (the reference profile has ~200)
MAX_NODES = 10_000
#: nesting depth, aliases expanded (the reference profile nests 5 deep)
MAX_DEPTH = 32


class ReadError(InvalidInput):
    """A file that cannot be a profile; ``str()`` is the problem without the file name.
    ``brief``: the same without anything the file holds (no key, character or tag it
    contains), for a file that another profile names and may be anything."""

    def __init__(self, message: str, *, brief: str | None = None) -> None:
        super().__init__(message)
        self.brief = brief or message


class _Bound(InvalidInput):
    """The document exceeds a limit (not a syntax error), raised while it is composed;
    ``mark`` and ``path`` say where."""

    def __init__(self, problem: str, mark: Any, path: tuple[Any, ...] = ()) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = mark
        self.path = path


_FEWER = (
    "a profile needs far fewer: write the values out, or share them between files with extends:"
)


class _Loader(yaml.SafeLoader):
    """SafeLoader with the limits above, refusing duplicate keys: PyYAML silently keeps
    the last one, which turns a copy-paste slip into a silently different deployment."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._path: list[Any] = []
        self._composed = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._composed += 1
        if parent is not None:  # index: the key node in a mapping, the position in a list
            self._path.append(index.value if isinstance(index, ScalarNode) else index)
        try:
            if self._composed > MAX_NODES:
                raise _Bound(f"more than {MAX_NODES} values; {_FEWER}", self._mark(), self.at)
            if len(self._path) > MAX_DEPTH:
                raise _Bound(
                    f"nested deeper than {MAX_DEPTH} levels; {_FEWER}", self._mark(), self.at
                )
            return super().compose_node(parent, index)
        finally:
            if parent is not None:
                self._path.pop()

    @property
    def at(self) -> tuple[Any, ...]:
        return tuple(p if isinstance(p, (str, int)) else "?" for p in self._path)

    def _mark(self) -> Any:
        return self.peek_event().start_mark  # type: ignore[no-untyped-call]

    def compose_document(self) -> Node | None:
        node: Node | None = super().compose_document()
        if node is not None:
            _Expansion().size(node, ())
        return node


class _Expansion:
    """Values a node stands for once every alias is expanded, memoised per node (aliases
    share the node object), refused as soon as a limit is passed, naming the key."""

    def __init__(self) -> None:
        self.sizes: dict[int, int] = {}
        self.open: set[int] = set()

    def size(self, node: Node, path: tuple[Any, ...]) -> int:
        key = id(node)
        if key in self.sizes:
            return self.sizes[key]
        if key in self.open:
            raise _Bound("an alias refers to the value that contains it", node.start_mark, path)
        if len(path) > MAX_DEPTH:
            raise _Bound(
                f"aliases nest this value deeper than {MAX_DEPTH} levels; {_FEWER}",
                node.start_mark,
                path,
            )
        self.open.add(key)
        total = 1 + sum(self.size(child, (*path, at)) for at, child in _children(node))
        if total > MAX_NODES:
            raise _Bound(
                f"aliases expand this value to more than {MAX_NODES} values; {_FEWER}",
                node.start_mark,
                path,
            )
        self.open.discard(key)
        self.sizes[key] = total
        return total


def _children(node: Node) -> list[tuple[Any, Node]]:
    if isinstance(node, SequenceNode):
        return list(enumerate(node.value))
    if isinstance(node, MappingNode):
        out: list[tuple[Any, Node]] = []
        for k, v in node.value:
            name = k.value if isinstance(k, ScalarNode) else "?"
            out += [(name, k), (name, v)]
        return out
    return []


def _construct_mapping(loader: _Loader, node: MappingNode, deep: bool = False) -> Any:
    loader.flatten_mapping(node)
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hashable = hash(key) is not None
        except TypeError:
            hashable = False
        if hashable and key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r} (first at line {seen[key] + 1})",
                key_node.start_mark,
            )
        if hashable:
            seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _where(text: str, offset: int) -> str:
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f"line {line}, column {column}"


def read_text(path: str) -> str:
    """The file's text; :class:`ReadError` when it is missing, too large or not UTF-8."""
    try:
        # non-blocking: a FIFO (or a device) is refused at once instead of hanging kctl
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ReadError("not a regular file; a profile is a YAML file")
            if st.st_size > MAX_BYTES:
                raise ReadError(_size_problem(st.st_size))
            os.set_blocking(fd, True)
            raw = fh.read(MAX_BYTES + 1)  # a growing file reports no final size
    except FileNotFoundError:
        raise ReadError("file not found") from None
    except OSError as exc:
        raise ReadError(f"cannot read the file: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise ReadError(_size_problem(len(raw)))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start].decode("utf-8")  # valid up to the bad byte
        where = _where(before, len(before))
        raise ReadError(
            f"{where}: not UTF-8 text (byte 0x{raw[exc.start]:02x}); save the file as UTF-8",
            brief=f"{where}: not UTF-8 text",
        ) from None
    return text.removeprefix("\ufeff")


def _size_problem(size: int) -> str:
    return (
        f"the file is {size} bytes, over the {MAX_BYTES} byte limit for a profile "
        "(profiles are a few KB); refused before parsing"
    )


def parse(text: str) -> Any:
    """The YAML document in ``text`` as plain data; :class:`ReadError` names the line."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except _Bound as exc:
        mark = exc.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        field = f"{format_path(exc.path)}: " if exc.path else ""
        raise ReadError(
            f"{field}refused{where}: {exc.problem}", brief=f"refused{where}: {exc.problem}"
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown line"
        what = exc.problem or exc.context or "invalid YAML"
        raise ReadError(f"{where}: invalid YAML: {what}", brief=f"{where}: invalid YAML") from None
    except yaml.reader.ReaderError as exc:
        char = chr(exc.character) if isinstance(exc.character, int) else exc.character
        where = _where(text, exc.position)
        raise ReadError(
            f"{where}: invalid YAML: character {char!r} is not allowed in YAML; remove it",
            brief=f"{where}: invalid YAML",
        ) from None
    except yaml.YAMLError as exc:
        raise ReadError(f"invalid YAML: {exc}", brief="invalid YAML") from None


def read_profile_data(path: str) -> Any:
    """:func:`read_text` then :func:`parse`."""
    return parse(read_text(path))
