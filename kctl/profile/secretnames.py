"""Which environment variable names hold secrets, and the stand-in for a value kctl must
not show. No imports from the rest of kctl: the profile's rules use it while the model is
being defined."""

from __future__ import annotations

import re

#: the parts of an environment variable name that say it holds a secret
_SECRET_WORDS = {
    "TOKEN",
    "KEY",
    "SECRET",
    "SECRETS",
    "PASSWORD",
    "PASSWD",
    "APIKEY",
    "ACCESSKEY",
    "CREDENTIAL",
    "CREDENTIALS",
}
_SECRET_SUFFIX = re.compile(r"(TOKEN|APIKEY|SECRET|PASSWORD|PASSWD)$")


def looks_secret(name: str) -> bool:
    """True for an environment variable name that looks like it holds a secret
    (``HF_TOKEN``, ``OPENAI_API_KEY``, ``DB_PASSWORD``), by its ``_``-separated words, so
    that ``TOKENIZERS_PARALLELISM`` is not one."""
    words = name.upper().split("_")
    return any(w in _SECRET_WORDS or _SECRET_SUFFIX.search(w) for w in words if w)


class Hidden:
    """Stands for a value kctl must not show (a problem line's ``got``)."""

    def __repr__(self) -> str:
        return "<value not shown>"
