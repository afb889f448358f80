"""The API key for kctl's own clients of a keyed fleet on Kubernetes: the router (its
``--api-key``, the key it sends the workers) and the Argo smoke Job (its requests to the
canary). Pure functions.

Both read the key from the Secret the serving pods mount as SGLang's ``--config`` file
(``server.api_key``'s reference; its key holds ``api-key: <the key>``), given to the
container as the environment variable :data:`ENV` through ``secretKeyRef``: the rendered
objects name the Secret, never the value. A few lines of Python (:data:`READ_KEY`) take the
key out of that text inside the container; the router's gets it into
``sglang_router.launch_router``'s ``sys.argv`` in-process (:data:`ROUTER_LAUNCH`), so it
is on no command line (``ps`` in the pod, the pod spec's ``args``).
"""

from __future__ import annotations

from typing import Any

from kctl.k8s.pod import secret_key_ref
from kctl.k8s.target import Target

#: the environment variable that holds the API key Secret's text (SGLang's config line)
ENV = "KCTL_SGLANG_CONFIG"
#: the variable name :func:`~kctl.k8s.pod.secret_key_ref` derives the default Secret key
#: from (``sglang-api-key``), as the serving pods' ``--config`` volume does
KEY_NAME = "SGLANG_API_KEY"

#: Python that sets ``api_key`` from :data:`ENV` (None when unset): the config text as
#: JSON (``{"api-key": ...}``, what kctl's docker runtime writes) or YAML's one line
#: ``api-key: <the key>`` (optionally quoted)
READ_KEY = """\
import json, os
def _api_key():
    text = os.environ.get("KCTL_SGLANG_CONFIG", "").strip()
    if not text:
        return None
    try:
        found = json.loads(text)
    except ValueError:
        found = {}
        for line in text.splitlines():
            name, _, value = line.partition(":")
            found[name.strip()] = value.strip().strip("'\\"")
    key = found.get("api-key", found.get("api_key")) if isinstance(found, dict) else None
    if not key:
        raise SystemExit("KCTL_SGLANG_CONFIG holds no 'api-key: <the key>' line")
    return str(key)
api_key = _api_key()
"""

#: the router's launch with the key: ``python3 -c ROUTER_LAUNCH <the router's args>``
ROUTER_LAUNCH = (
    READ_KEY
    + """\
import runpy, sys
sys.argv[0] = "launch_router"
if api_key is not None:
    sys.argv += ["--api-key", api_key]
runpy.run_module("sglang_router.launch_router", run_name="__main__", alter_sys=True)
"""
)


def env(target: Target) -> list[dict[str, Any]]:
    """The container's ``env`` entry for the API key's Secret; none without a key."""
    key = target.profile.server.api_key
    if key is None:
        return []
    return [{"name": ENV, "valueFrom": {"secretKeyRef": secret_key_ref(KEY_NAME, key)}}]
