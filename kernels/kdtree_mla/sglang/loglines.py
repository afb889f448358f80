"""The activation log-line contract shared by the SGLang hook, the simulator and kctl's health check.

Exactly one of these lines is printed by a server process that decides about the kernel::

    kdtree-verify: active kernel=kdtree_mla-<version> arch=sm_<NN> sglang=<version> path=<path>
    kdtree-verify: declined reason="<why>" sglang=<version>

A prefix (timestamp, logger name) before the line is allowed; kctl matches the regexes
:data:`ACTIVE_RE` and :data:`DECLINED_RE` anywhere in a log line. This module imports only
``re`` so CPU tests and kctl-side tests can check the contract without torch or SGLang.
"""

from __future__ import annotations

import re

#: The marker every line of the contract starts with.
MARKER = "kdtree-verify:"

#: ``str.format`` template of the line printed when the kernel serves target verify.
ACTIVE_FORMAT = (
    "kdtree-verify: active kernel=kdtree_mla-{kernel} arch=sm_{arch} sglang={sglang} path={path}"
)
#: The ways in: ``plugin`` (``--attention-backend kdtree``), ``startup-hook`` (``KDTREE_VERIFY=1``).
PATHS = ("plugin", "startup-hook")

#: ``str.format`` template of the line printed when the hook leaves SGLang untouched.
DECLINED_FORMAT = 'kdtree-verify: declined reason="{reason}" sglang={sglang}'

#: What kctl's health check searches for (``re.search`` on each log line).
ACTIVE_PATTERN = r"kdtree-verify: active\b"
DECLINED_PATTERN = r"kdtree-verify: declined\b"
ACTIVE_RE = re.compile(ACTIVE_PATTERN)
DECLINED_RE = re.compile(DECLINED_PATTERN)

#: Full-shape regexes, for tests that check every field of a line.
ACTIVE_LINE_RE = re.compile(
    r"kdtree-verify: active kernel=kdtree_mla-(?P<kernel>\S+) arch=sm_(?P<arch>\d+)"
    r" sglang=(?P<sglang>\S+)(?: path=(?P<path>plugin|startup-hook))?$"
)
DECLINED_LINE_RE = re.compile(
    r'kdtree-verify: declined reason="(?P<reason>[^"\n]*)" sglang=(?P<sglang>\S+)$'
)

#: What ``sglang=`` says when SGLang's distribution metadata cannot be read.
UNKNOWN_VERSION = "unknown"


def format_active(
    kernel_version: str, arch: int | str, sglang_version: str, path: str = "startup-hook"
) -> str:
    """The activation line, e.g. ``format_active("0.1.0", 90, "0.5.23", "plugin")``.

    ``arch`` is the compute capability as digits (``90``, ``120``) or ``"sm_90"``; ``path`` is
    one of :data:`PATHS`.
    """
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS} (got {path!r})")
    arch_digits = str(arch).removeprefix("sm_")
    if not arch_digits.isdigit():
        raise ValueError(f"arch must be digits like 90 or 'sm_120' (got {arch!r})")
    return ACTIVE_FORMAT.format(
        kernel=_token(kernel_version), arch=arch_digits, sglang=_token(sglang_version), path=path
    )


def format_declined(reason: str, sglang_version: str) -> str:
    """The decline line; ``reason`` is made single-line and stripped of double quotes."""
    clean = " ".join(reason.replace('"', "'").split()) or "unspecified"
    return DECLINED_FORMAT.format(reason=clean, sglang=_token(sglang_version))


def _token(value: str) -> str:
    # Fields after '=' are whitespace-free tokens; an empty one would break the line's shape.
    text = "".join(str(value).split())
    return text or UNKNOWN_VERSION
