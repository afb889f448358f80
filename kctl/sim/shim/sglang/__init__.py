"""A stand-in ``sglang`` package for test images: ``python3 -m sglang.launch_server ARGS``
runs kctl's simulator, and ``sglang.srt.server_args.prepare_server_args`` parses with the
parser of the release the simulator imitates (what kctl's image probe asks an image). Needs
``kctl/sim/shim`` and the directory holding the ``kctl`` package on PYTHONPATH. It is not
SGLang."""

import os

# the release the simulator imitates: KCTL_SIM_SGLANG_VERSION, as the simulator reads it
__version__ = os.environ.get("KCTL_SIM_SGLANG_VERSION") or "0.5.10"
