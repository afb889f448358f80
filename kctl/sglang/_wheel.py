"""Facts read from an SGLang wheel's files by their syntax tree (nothing is imported).

:func:`read_facts` returns, for one wheel: the launcher it offers, the hooks kctl's
kernel router patches or registers through (Triton backend methods, the model runner's
backend initialiser, ``extend_attention_fwd``, the plugin entry-point groups, the
attention-backend registry) and the speculative-decoding fields the tokenizer manager
writes into a response's ``meta_info``.
"""

from __future__ import annotations

import ast
import configparser
import zipfile
from pathlib import PurePosixPath
from typing import Any

TRITON_BACKEND = "sglang/srt/layers/attention/triton_backend.py"
TRITON_CLASS = "TritonAttnBackend"
MODEL_RUNNER = "sglang/srt/model_executor/model_runner.py"
PLUGINS = "sglang/srt/plugins/__init__.py"
REGISTRY = "sglang/srt/layers/attention/attention_registry.py"
TOKENIZER_MANAGER = "sglang/srt/managers/tokenizer_manager.py"
CLI_MAIN = "sglang/cli/main.py"

#: Triton backend methods whose presence and parameters decide how the kernel attaches.
TRITON_METHODS = (
    "init_forward_metadata",
    "init_cuda_graph_state",
    "init_forward_metadata_capture_cuda_graph",
    "init_forward_metadata_replay_cuda_graph",
    "init_forward_metadata_out_graph",
    "init_forward_metadata_in_graph",
    "get_cuda_graph_seq_len_fill_value",
    "get_verify_buffers_to_fill_after_draft",
    "forward_extend",
    "forward_decode",
)

Tree = ast.Module


class WheelFiles:
    """The ``.py`` files of one wheel, parsed on first use."""

    def __init__(self, zf: zipfile.ZipFile) -> None:
        self.zf = zf
        self.names = frozenset(zf.namelist())
        self._trees: dict[str, Tree] = {}

    def text(self, path: str) -> str | None:
        if path not in self.names:
            return None
        return self.zf.read(path).decode("utf-8")

    def tree(self, path: str) -> Tree | None:
        if path not in self._trees:
            text = self.text(path)
            if text is None:
                return None
            self._trees[path] = ast.parse(text, filename=path)
        return self._trees[path]

    def module_path(self, dotted: str) -> str | None:
        base = dotted.replace(".", "/")
        for candidate in (f"{base}.py", f"{base}/__init__.py"):
            if candidate in self.names:
                return candidate
        return None


def _dotted(path: str) -> str:
    p = PurePosixPath(path)
    parts = p.parent.parts if p.name == "__init__.py" else (*p.parent.parts, p.stem)
    return ".".join(parts)


def params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """A function's parameter names in order: ``*name``/``**name`` for the catch-alls,
    a bare ``*`` before keyword-only ones."""
    a = fn.args
    out = [x.arg for x in (*a.posonlyargs, *a.args)]
    if a.vararg is not None:
        out.append("*" + a.vararg.arg)
    elif a.kwonlyargs:
        out.append("*")
    out += [x.arg for x in a.kwonlyargs]
    if a.kwarg is not None:
        out.append("**" + a.kwarg.arg)
    return out


def _class(tree: Tree, name: str) -> ast.ClassDef | None:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _imported_from(tree: Tree, name: str) -> str | None:
    """The absolute module that ``tree`` imports ``name`` from, at any depth."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and any((alias.asname or alias.name) == name for alias in node.names)
        ):
            return node.module
    return None


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def class_chain(files: WheelFiles, path: str, name: str) -> list[tuple[str, ast.ClassDef]]:
    """``name`` in ``path`` and its base classes that the wheel defines, nearest first,
    as ``(dotted.module.Class, node)``."""
    chain: list[tuple[str, ast.ClassDef]] = []
    todo: list[tuple[str, str]] = [(path, name)]
    while todo:
        where, cls_name = todo.pop(0)
        tree = files.tree(where)
        node = None if tree is None else _class(tree, cls_name)
        if tree is None or node is None:
            continue
        chain.append((f"{_dotted(where)}.{cls_name}", node))
        for base in node.bases:
            if isinstance(base, ast.Name):
                module = _imported_from(tree, base.id)
                base_path = where if module is None else files.module_path(module)
                if base_path is not None:
                    todo.append((base_path, base.id))
    return chain


def triton_hooks(files: WheelFiles) -> dict[str, Any]:
    """For each of :data:`TRITON_METHODS`: the class that defines it for
    ``TritonAttnBackend`` (itself or a base) and its parameters; absent ones are omitted."""
    chain = class_chain(files, TRITON_BACKEND, TRITON_CLASS)
    found: dict[str, Any] = {}
    for qualname, node in chain:
        for method, fn in _methods(node).items():
            if method in TRITON_METHODS and method not in found:
                found[method] = {"defined_in": qualname, "params": params(fn)}
    return {
        "class": chain[0][0] if chain else None,
        "methods": {m: found[m] for m in TRITON_METHODS if m in found},
    }


def model_runner_hooks(files: WheelFiles) -> list[str]:
    """Which of ``init_attention_backend`` / ``init_attention_backends`` ``ModelRunner``
    (or a base or mixin it names) defines."""
    wanted = ("init_attention_backend", "init_attention_backends")
    have: set[str] = set()
    for _, node in class_chain(files, MODEL_RUNNER, "ModelRunner"):
        have |= set(_methods(node)) & set(wanted)
    return [w for w in wanted if w in have]


def extend_attention(files: WheelFiles) -> dict[str, Any] | None:
    """Where the Triton backend imports ``extend_attention_fwd`` from, and its parameters."""
    tree = files.tree(TRITON_BACKEND)
    module = None if tree is None else _imported_from(tree, "extend_attention_fwd")
    path = None if module is None else files.module_path(module)
    target = None if path is None else files.tree(path)
    if module is None or target is None:
        return None
    fn = next(
        (
            n
            for n in target.body
            if isinstance(n, ast.FunctionDef) and n.name == "extend_attention_fwd"
        ),
        None,
    )
    return {"module": module, "params": None if fn is None else params(fn)}


def _string_assignments(tree: Tree) -> dict[str, str]:
    out: dict[str, str] = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = node.value.value
    return out


def plugins(files: WheelFiles) -> dict[str, Any]:
    """Whether ``sglang.srt.plugins`` exists, and the entry-point groups it names."""
    tree = files.tree(PLUGINS)
    if tree is None:
        return {"package": False, "entry_point_groups": []}
    groups = sorted(
        value
        for name, value in _string_assignments(tree).items()
        if name.endswith("_GROUP") and value.startswith("sglang")
    )
    return {"package": True, "entry_point_groups": groups}


def _defines(tree: Tree | None, name: str) -> bool:
    """Whether ``tree`` defines ``name`` at top level (a function or an assignment)."""
    if tree is None:
        return False
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return True
    return False


def attention_registry(files: WheelFiles) -> dict[str, Any]:
    """``register_attention_backend`` in the registry module, and the module that defines
    ``add_attention_backend_choices`` (``server_args`` on older releases)."""
    choices_at = next(
        (
            _dotted(path)
            for path in ("sglang/srt/arg_groups/choices.py", "sglang/srt/server_args.py")
            if _defines(files.tree(path), "add_attention_backend_choices")
        ),
        None,
    )
    return {
        "register_attention_backend": _defines(files.tree(REGISTRY), "register_attention_backend"),
        "add_attention_backend_choices": choices_at,
    }


def spec_metrics(files: WheelFiles) -> list[str]:
    """The ``spec_*`` keys the tokenizer manager writes as ``meta_info["spec_..."] = ...``."""
    tree = files.tree(TOKENIZER_MANAGER)
    keys: set[str] = set()
    for node in ast.walk(tree) if tree is not None else ():
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if (
                isinstance(target, ast.Subscript)
                and isinstance(target.value, ast.Name)
                and target.value.id == "meta_info"
                and isinstance(target.slice, ast.Constant)
                and isinstance(target.slice.value, str)
                and target.slice.value.startswith("spec_")
            ):
                keys.add(target.slice.value)
    return sorted(keys)


def _console_scripts(files: WheelFiles) -> dict[str, str]:
    path = next((n for n in files.names if n.endswith(".dist-info/entry_points.txt")), None)
    text = None if path is None else files.text(path)
    if text is None:
        return {}
    cp = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read_string(text)
    return dict(cp["console_scripts"]) if cp.has_section("console_scripts") else {}


def _has_subcommand(tree: Tree | None, name: str) -> bool:
    if tree is None:
        return False
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_parser"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value == name
        ):
            return True
    return False


def launcher(files: WheelFiles) -> dict[str, Any]:
    """``sglang serve`` where the ``sglang`` console script has a ``serve`` subcommand,
    else ``python3 -m sglang.launch_server``."""
    scripts = _console_scripts(files)
    entry = scripts.get("sglang")
    serve = entry is not None and _has_subcommand(
        files.tree(files.module_path(entry.split(":")[0].strip()) or CLI_MAIN), "serve"
    )
    argv = ["sglang", "serve"] if serve else ["python3", "-m", "sglang.launch_server"]
    return {
        "argv": argv,
        "sglang_console_script": entry is not None,
        "serve_subcommand": serve,
        "launch_server_module": "sglang/launch_server.py" in files.names,
    }


def read_facts(zf: zipfile.ZipFile) -> dict[str, Any]:
    """Every fact this module reads, for one open wheel."""
    files = WheelFiles(zf)
    return {
        "launcher": launcher(files),
        "hooks": {
            "triton_backend": triton_hooks(files),
            "model_runner": model_runner_hooks(files),
            "extend_attention_fwd": extend_attention(files),
            "plugins": plugins(files),
            "attention_registry": attention_registry(files),
        },
        "spec_metrics": spec_metrics(files),
    }
