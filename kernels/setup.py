"""Builds kdtree_mla._C (torch CUDA extension). Offline: no downloads, no submodules.

Target architectures come from TORCH_CUDA_ARCH_LIST (default "9.0;12.0"), e.g.
    TORCH_CUDA_ARCH_LIST=12.0 pip install --no-build-isolation ./kernels
KDTREE_DIAG=1 also compiles the diagnostic kernel variants (loads only, math only, traced, other
pipeline shapes; research/kernel-lab/); the default build holds the two production variants.

The build writes nothing into the source tree but the extension itself (kernels/build-files.txt
lists what it reads): the arch list reaches the extension as a compile definition
(kdtree_mla._C.ARCH_LIST, read by kdtree_mla.api.compiled_archs()).
"""

import os
import re

from setuptools import setup
from setuptools.command.build_py import build_py

os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0;12.0")
ARCH_LIST = os.environ["TORCH_CUDA_ARCH_LIST"]
if any(c in ARCH_LIST for c in '"\\'):
    raise SystemExit(f"TORCH_CUDA_ARCH_LIST: unexpected quote or backslash in {ARCH_LIST!r}")
# The kernel is written for the sm_90 and sm_120 families (shared memory per block, the
# variants' pipeline depths); another target (sm_100, say) would build a variant that was never
# run there, so it is refused here rather than trapping at the first call.
_OTHER = [
    a
    for a in re.split(r"[;, ]+", ARCH_LIST.strip())
    if a and not re.fullmatch(r"(9\.0a?|12\.\d[af]?)(\+PTX)?", a)
]
if _OTHER:
    raise SystemExit(
        f"TORCH_CUDA_ARCH_LIST: {', '.join(_OTHER)} is not a target of kdtree_mla (it builds for 9.0 and 12.x, "
        f'e.g. TORCH_CUDA_ARCH_LIST="9.0;12.0")'
    )

from torch.utils.cpp_extension import BuildExtension, CUDAExtension  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(HERE, "csrc")
DIAG = os.environ.get("KDTREE_DIAG", "0") not in ("", "0")
DEFINES = [f'-DKDTREE_ARCH_LIST="{ARCH_LIST}"', f"-DKDTREE_DIAG={int(DIAG)}"]


class build_py_with_startup_hook(build_py):  # noqa: N801
    """SGLang startup hook: ship kdtree_mla_startup.pth at the wheel's root (site-packages/).

    The .pth runs at every interpreter start and imports kdtree_mla._startup only when
    KDTREE_VERIFY=1 (docs/sglang-integration.md).
    """

    def run(self):
        super().run()
        self.copy_file(
            os.path.join(HERE, "kdtree_mla_startup.pth"),
            os.path.join(self.build_lib, "kdtree_mla_startup.pth"),
        )


setup(
    ext_modules=[
        CUDAExtension(
            name="kdtree_mla._C",
            sources=[os.path.join("csrc", "binding.cpp"), os.path.join("csrc", "verify_launch.cu")],
            include_dirs=[CSRC],
            extra_compile_args={
                "cxx": ["-O3", *DEFINES],
                "nvcc": ["-O3", "-Xptxas=-warn-spills", "--use_fast_math", *DEFINES],
            },
        )
    ],
    cmdclass={
        "build_ext": BuildExtension.with_options(use_ninja=True),
        "build_py": build_py_with_startup_hook,  # SGLang startup hook
    },
)
