"""The shim's ``sglang.srt``: only ``server_args`` (see the package docstring)."""
