"""Run SGLang's real Triton attention backend without installing SGLang (GPU tests, benchmarks).

SGLang's pure-Python wheel carries ``TritonAttnBackend`` and its Triton kernels, but importing
them the normal way pulls in the whole server (FastAPI, transformers, sgl-kernel ...).
:func:`build_tree` extracts only these files from the wheel, unchanged::

    sglang/srt/layers/attention/triton_backend.py
    sglang/srt/layers/attention/utils.py                  (create_flashinfer_kv_indices_triton)
    sglang/srt/layers/attention/triton_ops/extend_attention.py
    sglang/srt/layers/attention/triton_ops/decode_attention.py
    sglang/srt/layers/attention/triton_ops/prefill_attention.py

and writes small stand-ins for what they import (:data:`STUBS` says what each one is; those
both layouts write are :mod:`.standalone_stubs`'s, and ``ForwardMode`` is copied from the
wheel's own ``forward_batch_info.py``). Nothing
that runs on the target-verify path is stubbed: metadata (``init_forward_metadata``, the
CUDA-graph hooks), the KV-index kernel and ``extend_attention_fwd`` are SGLang's code. A
``sglang-<version>.dist-info`` makes the version readable by ``importlib.metadata``, as the
startup hook reads it in the image.

Releases that read SGLang's runtime context (0.5.14 on; a wheel with
``sglang/srt/runtime_context.py``) take :mod:`.standalone_runtime`'s files and stand-ins
instead; the lists below are the older releases' (0.5.9 to 0.5.13).

The builders in :mod:`.standalone_objects` (:func:`make_model_runner`, :class:`MLAPool`,
:func:`make_layer`, :func:`verify_batch`, exported here too) stand in for the model runner, the
KV pool and the speculative batch with exactly the attributes ``TritonAttnBackend`` reads.
They import torch when called.
"""

from __future__ import annotations

import ast
import re
import zipfile
from pathlib import Path

from kdtree_mla_testing.standalone_objects import (
    MLAPool,
    make_layer,
    make_model_runner,
    verify_batch,
)
from kdtree_mla_testing.standalone_stubs import COMMON

#: Files taken unchanged from the wheel (paths inside it).
REAL_FILES = (
    "sglang/srt/layers/attention/triton_backend.py",
    "sglang/srt/layers/attention/triton_ops/extend_attention.py",
    "sglang/srt/layers/attention/triton_ops/decode_attention.py",
    "sglang/srt/layers/attention/triton_ops/prefill_attention.py",
)
#: Taken too when the release has them: the KV-index kernel (``utils.py`` up to 0.5.12,
#: ``triton_ops/kv_indices.py`` from 0.5.13), the split-count helper (0.5.13), and the plugin
#: framework (0.5.11 on: ``load_plugins`` discovers the kernel's entry point for real).
OPTIONAL_FILES = (
    "sglang/srt/layers/attention/utils.py",
    "sglang/srt/layers/attention/triton_ops/kv_indices.py",
    "sglang/srt/layers/attention/triton_ops/metadata.py",
    "sglang/srt/plugins/__init__.py",
    "sglang/srt/plugins/hook_registry.py",
)

#: Stand-ins: path -> (what it replaces, source); the ones both layouts write come from
#: :data:`.standalone_stubs.COMMON`.
STUBS: dict[str, tuple[str, str]] = {
    **COMMON,
    "sglang/kernel_api_logging.py": (
        "debug_kernel_api: the identity decorator (logging off, as by default)",
        "def debug_kernel_api(fn):\n    return fn\n",
    ),
    "sglang/srt/environ.py": (
        "envs.SGLANG_PLUGINS (the plugin framework's filter), read from the environment",
        """
import os
from types import SimpleNamespace

envs = SimpleNamespace(
    SGLANG_PLUGINS=SimpleNamespace(get=lambda: os.environ.get("SGLANG_PLUGINS", "")),
    SGLANG_PLATFORM=SimpleNamespace(get=lambda: os.environ.get("SGLANG_PLATFORM", "")),
)
""",
    ),
    "sglang/srt/server_args.py": (
        "ATTENTION_BACKEND_CHOICES and add_attention_backend_choices (same body), nothing else",
        """
ATTENTION_BACKEND_CHOICES = ["triton", "flashinfer", "fa3"]


def add_attention_backend_choices(choices):
    ATTENTION_BACKEND_CHOICES.extend(choices)
""",
    ),
    "sglang/srt/layers/attention/base_attn_backend.py": (
        "AttentionBackend: a base class with 0.5.13's no-op graph hooks (forward() dispatch unused)",
        """
class AttentionBackend:
    def __init__(self):
        pass

    def init_forward_metadata_out_graph(self, forward_batch, in_capture=False):
        pass

    def init_forward_metadata_in_graph(self, forward_batch):
        pass
""",
    ),
    "sglang/srt/layers/dp_attention.py": (
        "get_attention_tp_size() = 1 (one attention-TP rank)",
        "def get_attention_tp_size():\n    return 1\n",
    ),
}


def build_tree(wheel: Path, dest: Path, *, version: str | None = None) -> Path:
    """Write the standalone SGLang tree under ``dest`` and return ``dest``.

    ``version`` overrides the one in the dist-info (to test the decline of unsupported versions
    on SGLang's real code); by default it is the wheel's. Raises ``FileNotFoundError`` naming
    the files a wheel lacks.
    """
    from kdtree_mla_testing import standalone_runtime

    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        required: tuple[str, ...]
        optional: tuple[str, ...]
        if standalone_runtime.MARKER in names:
            required, optional, stubs = standalone_runtime.FILES, (), standalone_runtime.STUBS
        else:
            required, optional, stubs = REAL_FILES, OPTIONAL_FILES, STUBS
        missing = [f for f in required if f not in names]
        if missing:
            raise FileNotFoundError(f"{wheel.name} lacks {', '.join(missing)}")
        taken = [*required, *(f for f in optional if f in names)]
        for name in taken:
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(name))
        for rel, (_what, source) in stubs.items():
            if rel in taken:
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(
                _TAKEN_RE.sub(lambda m: _definition(zf, m[1], m[2]), source.lstrip("\n"))
            )
    for pkg in sorted({str(Path(f).parent) for f in (*taken, *stubs)}):
        init = dest / pkg / "__init__.py"
        if not init.exists():
            init.write_text("")
    wheel_version = wheel.name.split("-")[1]
    dist = dest / f"sglang-{version or wheel_version}.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: sglang\nVersion: {version or wheel_version}\n"
    )
    return dest


#: A stub line replaced by a definition's source from the wheel: ``#: taken: <path> <name>``.
_TAKEN_RE = re.compile(r"^#: taken: (\S+) (\w+)$", re.MULTILINE)


def _definition(zf: zipfile.ZipFile, path: str, name: str) -> str:
    """The source of the top-level class or function ``name`` in the wheel's ``path``,
    decorators included."""
    try:
        source = zf.read(path).decode()
    except KeyError:
        raise FileNotFoundError(f"the wheel lacks {path} (for its {name})") from None
    for node in ast.parse(source).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            assert node.end_lineno is not None
            return "\n".join(source.splitlines()[first - 1 : node.end_lineno])
    raise FileNotFoundError(f"{path} in the wheel defines no {name}")


__all__ = [
    "OPTIONAL_FILES",
    "REAL_FILES",
    "STUBS",
    "MLAPool",
    "build_tree",
    "make_layer",
    "make_model_runner",
    "verify_batch",
]
