"""A stand-in ``sglang`` package for test images: ``python3 -m sglang.launch_server ARGS``
runs kctl's simulator. Needs ``kctl/sim/shim`` and the directory holding the ``kctl``
package on PYTHONPATH. It is not SGLang."""

# the version the simulator reports by default (KCTL_SIM_SGLANG_VERSION overrides it there)
__version__ = "0.5.10"
