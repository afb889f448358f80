"""The ``sglang.srt.plugins`` entry point: registers the attention backend ``kdtree``.

SGLang 0.5.11 and later load every entry point of the group ``sglang.srt.plugins`` early in
every process (``sglang serve``, ``launch_server``, the engine, each scheduler), filtered by
``SGLANG_PLUGINS`` when that is set. The kernel package declares one, named ``kdtree``
(``kernels/pyproject.toml``), pointing at :func:`register`, which

* registers the backend factory :func:`create_backend` under the name ``kdtree`` with
  SGLang's own ``register_attention_backend``, and
* adds ``kdtree`` to ``--attention-backend``'s choices with SGLang's
  ``add_attention_backend_choices`` (``srt/server_args.py`` up to 0.5.19,
  ``srt/arg_groups/choices.py`` from 0.5.20).

Registering prints nothing and changes nothing else: a server started without
``--attention-backend kdtree`` never calls the factory. The factory builds
:class:`~kdtree_mla.sglang.backend` 's subclass of the release's ``TritonAttnBackend``, which
checks the release's hooks (:func:`~kdtree_mla.sglang.releases.route`) and prints the one
activation or decline line.

This module imports only the standard library and the kernel package's pure modules, so the
CPU tests import it without torch or SGLang.
"""

from __future__ import annotations

import importlib
from typing import Any

from kdtree_mla.sglang.releases import BACKEND_NAME, UnsupportedRelease

#: Where ``add_attention_backend_choices`` lives, newest first.
CHOICES_MODULES = ("sglang.srt.arg_groups.choices", "sglang.srt.server_args")
REGISTRY_MODULE = "sglang.srt.layers.attention.attention_registry"


def register() -> None:
    """Entry point: register ``kdtree`` with SGLang's backend registry and its choices.

    Raises :class:`~kdtree_mla.sglang.releases.UnsupportedRelease` with the reason when the
    release lacks either hook (SGLang logs a failed plugin with its traceback, and
    ``--attention-backend kdtree`` is then refused by SGLang's own parser).
    """
    try:
        registry = importlib.import_module(REGISTRY_MODULE)
    except Exception as exc:
        raise UnsupportedRelease(f"cannot import {REGISTRY_MODULE}: {exc}") from exc
    register_backend = getattr(registry, "register_attention_backend", None)
    if not callable(register_backend):
        raise UnsupportedRelease(f"{REGISTRY_MODULE} has no register_attention_backend")
    module, add_choices = choices_hook()
    if add_choices is None:
        raise UnsupportedRelease(
            f"no add_attention_backend_choices in {' or '.join(CHOICES_MODULES)}"
        )
    register_backend(BACKEND_NAME)(create_backend)
    current = getattr(module, "ATTENTION_BACKEND_CHOICES", None)
    if current is None or BACKEND_NAME not in current:
        add_choices([BACKEND_NAME])


def choices_hook() -> tuple[Any, Any]:
    """(module, ``add_attention_backend_choices``) of the running SGLang, or (None, None)."""
    for name in CHOICES_MODULES:
        try:
            module = importlib.import_module(name)
        except Exception:
            continue
        add = getattr(module, "add_attention_backend_choices", None)
        if callable(add):
            return module, add
    return None, None


def create_backend(model_runner: Any) -> Any:
    """SGLang's backend factory for ``--attention-backend kdtree`` (one call per backend)."""
    from kdtree_mla.sglang.backend import create

    return create(model_runner)
