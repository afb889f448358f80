"""Interpreter-start entry point of the SGLang integration, run from ``kdtree_mla_startup.pth``.

The ``.pth`` line imports this module only when ``KDTREE_VERIFY=1``, so a process without the
variable imports nothing of ours. :func:`install` then only installs a post-import hook; SGLang
itself is patched when (and if) the process imports it. Nothing here may raise: a startup hook
that crashes would take every Python process in the image down with it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

#: The variable that turns the integration on; only the exact value "1" does.
ENV_VAR = "KDTREE_VERIFY"


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """True when the integration is requested (``KDTREE_VERIFY=1``)."""
    env = os.environ if environ is None else environ
    return env.get(ENV_VAR, "") == "1"


def install(environ: Mapping[str, str] | None = None) -> bool:
    """Install the SGLang post-import hook when enabled; return whether it was installed."""
    if not enabled(environ):
        return False
    try:
        from kdtree_mla.sglang.hook import install_hook

        install_hook()
    except Exception as exc:
        _report_failure(exc)
        return False
    return True


def _report_failure(exc: BaseException) -> None:
    try:
        from kdtree_mla.sglang import announce

        announce.declined(f"startup hook failed: {type(exc).__name__}: {exc}", "unknown")
    except Exception:
        pass
