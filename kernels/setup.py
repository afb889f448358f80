"""Builds kdtree_mla._C (torch CUDA extension). Offline: no downloads, no submodules.

Target architectures come from TORCH_CUDA_ARCH_LIST (default "9.0;12.0"), e.g.
    TORCH_CUDA_ARCH_LIST=12.0 pip install --no-build-isolation ./kernels
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0;12.0")

from torch.utils.cpp_extension import BuildExtension, CUDAExtension  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join(HERE, "csrc")

# Record the target architectures next to the extension (kdtree_mla.api.compiled_archs()).
with open(os.path.join(HERE, "kdtree_mla", "_build_info.py"), "w") as _f:
    _f.write(
        '"""Written by setup.py at build time."""\n\n'
        f"TORCH_CUDA_ARCH_LIST = {os.environ['TORCH_CUDA_ARCH_LIST']!r}\n"
    )


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
                "cxx": ["-O3"],
                "nvcc": ["-O3", "-Xptxas=-warn-spills", "--use_fast_math"],
            },
        )
    ],
    cmdclass={
        "build_ext": BuildExtension.with_options(use_ninja=True),
        "build_py": build_py_with_startup_hook,  # SGLang startup hook
    },
)
