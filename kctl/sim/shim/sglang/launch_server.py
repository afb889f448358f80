"""Shim for ``python3 -m sglang.launch_server``: run kctl's SGLang simulator instead."""

import sys

from kctl.sim.lifecycle import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
