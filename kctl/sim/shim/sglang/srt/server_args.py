"""The shim's ``prepare_server_args``: parses with the parser of the release the simulator
imitates (``sglang.__version__``), rebuilt from kctl's release table, plus the ``kdtree``
attention backend where that release takes plugin backends. Returns the parsed namespace."""

from __future__ import annotations

import argparse

import sglang
from kctl.sglang.kernel_support import kernel_choices
from kctl.sglang.releases import release


def prepare_server_args(argv: list[str]) -> argparse.Namespace:
    rel = release(sglang.__version__)
    return rel.parser(kernel_choices(rel)).parse_args(argv)
