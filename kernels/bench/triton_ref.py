"""Loads SGLang's Triton ``extend_attention_fwd`` from its pure-Python wheel, without the rest
of SGLang (whose server dependencies are absent on the device machine).

Only ``sglang.srt.utils.is_cuda/is_hip`` and ``prefill_attention.context_attention_fwd`` are
imported by that module; both are stubbed (the latter is used only by a path verify never
takes). Returns None with a reason when the wheel or Triton is missing.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import sys
import tempfile
import types
import zipfile

EXTEND_PATH = "sglang/srt/layers/attention/triton_ops/extend_attention.py"


def load_extend_attention(wheel_dir: str) -> tuple[object | None, str]:
    wheels = sorted(glob.glob(os.path.join(wheel_dir, "sglang-*.whl")))
    if not wheels:
        return None, f"no sglang wheel in {wheel_dir}"
    try:
        import triton  # noqa: F401
    except ImportError as exc:  # pragma: no cover - device only
        return None, f"triton not importable: {exc}"
    wheel = wheels[-1]
    with zipfile.ZipFile(wheel) as zf:
        src = zf.read(EXTEND_PATH).decode()
    tmp = tempfile.mkdtemp(prefix="sgl_triton_")
    path = os.path.join(tmp, "extend_attention.py")
    with open(path, "w") as f:
        f.write(src)
    stubs = {
        "sglang": types.ModuleType("sglang"),
        "sglang.srt": types.ModuleType("sglang.srt"),
        "sglang.srt.utils": types.ModuleType("sglang.srt.utils"),
        "sglang.srt.layers": types.ModuleType("sglang.srt.layers"),
        "sglang.srt.layers.attention": types.ModuleType("sglang.srt.layers.attention"),
        "sglang.srt.layers.attention.triton_ops": types.ModuleType(
            "sglang.srt.layers.attention.triton_ops"
        ),
        "sglang.srt.layers.attention.triton_ops.prefill_attention": types.ModuleType(
            "sglang.srt.layers.attention.triton_ops.prefill_attention"
        ),
    }
    stubs["sglang.srt.utils"].is_cuda = lambda: True
    stubs["sglang.srt.utils"].is_hip = lambda: False
    stubs["sglang.srt.layers.attention.triton_ops.prefill_attention"].context_attention_fwd = None
    saved = {k: sys.modules.get(k) for k in stubs}
    sys.modules.update(stubs)
    try:
        spec = importlib.util.spec_from_file_location("sgl_extend_attention", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    except Exception as exc:  # pragma: no cover - device only
        return None, f"loading {EXTEND_PATH} from {os.path.basename(wheel)} failed: {exc!r}"
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return mod.extend_attention_fwd, os.path.basename(wheel)
