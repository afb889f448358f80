"""A fleet's secrets as Docker secrets. A profile's ``server.secrets`` and
``server.api_key`` reach each replica as files Swarm mounts under ``/run/secrets`` (a
tmpfs, never in the image, the service spec or ``docker service inspect``), and the
replica's start wrapper (:data:`kctl.fleet.service.WRAPPER`) turns them into what SGLang
reads: each variable's file into that variable of the server's environment, the API key's
file (SGLang's config, ``{"api-key": ...}``) into ``--config <file>``.

Two halves, as everywhere in kctl:

* :func:`spec_secrets` (pure, used by :func:`kctl.fleet.service.service_spec` and so by
  ``kctl plan --fleet``): the ContainerSpec's ``Secrets`` with each secret's *reference*
  in place of its name (``<secret:env HF_TOKEN>``), and the wrapper's environment;
* :func:`materialize` (at deploy and rollback time, by the runner): reads each value now,
  has the driver create the Docker secret (:meth:`~kctl.fleet.view.FleetDriver.put_secret`)
  named ``kctl-<fleet>-<digest>``, the digest a SHA-256 of the fleet name and the value (a
  new value is a new secret, so a changed secret rolls the replicas like any change; Docker
  secrets cannot change), and fills its id and name in. The value itself goes only to
  the driver: never into a message, the store or the spec.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kctl.profile.model import Profile, SecretRef
from kctl.secrets import describe, resolve

#: the directory the start wrapper reads the files from (Swarm's mount point;
#: ``KCTL_SECRETS_DIR`` names another, as the wrapper's test does). Under ``--simulate``
#: the simulated orchestrator mounts them per task in its state dir and hands them to the
#: local runtime by reference instead (:meth:`kctl.fleet.simorch.Orchestrator.start`)
SECRETS_DIR = "/run/secrets"
ENV_SECRETS_DIR = "KCTL_SECRETS_DIR"
#: the server environment variables the wrapper reads from ``kctl-env-<NAME>`` files
ENV_SECRET_VARS = "KCTL_SECRET_VARS"
#: the file the wrapper passes as ``--config`` (the API key)
ENV_CONFIG_SECRET = "KCTL_CONFIG_SECRET"
ENV_FILE_PREFIX = "kctl-env-"
CONFIG_FILE = "kctl-sglang-config"
#: each file: root's, read-only for it (SGLang's images run as root)
FILE_MODE = 0o400


@dataclass(frozen=True)
class SecretFile:
    """One file a replica gets: its name under ``/run/secrets``, the reference its content
    comes from and the profile field that names it."""

    target: str
    ref: SecretRef
    field: str

    def data(self) -> bytes:
        """The file's content, read now (SecretUnavailable, exit 5, names the field)."""
        value = resolve(self.ref, self.field)
        if self.target == CONFIG_FILE:  # SGLang's --config, as the docker runtime writes it
            return json.dumps({"api-key": value}).encode()
        return value.encode()


def files(profile: Profile) -> tuple[SecretFile, ...]:
    server = profile.server
    out = [
        SecretFile(ENV_FILE_PREFIX + name, ref, f"server.secrets.{name}")
        for name, ref in server.secrets
    ]
    if server.api_key is not None:
        out.append(SecretFile(CONFIG_FILE, server.api_key, "server.api_key"))
    return tuple(out)


def spec_secrets(profile: Profile) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """``(ContainerSpec.Secrets, env)`` for ``profile``: references in place of the
    secrets' names (:func:`materialize` fills them in), and what the wrapper reads."""
    wanted = files(profile)
    entries = [
        {
            "SecretID": "",
            "SecretName": describe(f.ref),
            "File": {"Name": f.target, "UID": "0", "GID": "0", "Mode": FILE_MODE},
        }
        for f in wanted
    ]
    env: dict[str, str] = {}
    if names := [name for name, _ in profile.server.secrets]:
        env[ENV_SECRET_VARS] = ",".join(names)
    if profile.server.api_key is not None:
        env[ENV_CONFIG_SECRET] = CONFIG_FILE
    return entries, env


def secret_name(fleet: str, data: bytes) -> str:
    digest = hashlib.sha256(fleet.encode() + b"\0" + data).hexdigest()[:24]
    return f"kctl-{fleet}-{digest}"


#: ``put(name, data, labels) -> secret id``: create the Docker secret, or find it
Put = Callable[[str, bytes, dict[str, str]], str]


def materialize(
    spec: dict[str, Any], profile: Profile, fleet: str, labels: dict[str, str], put: Put
) -> dict[str, Any]:
    """A copy of ``spec`` whose ``Secrets`` name real Docker secrets, created by ``put``
    from the values read now; ``spec`` itself when it has none."""
    entries = spec["TaskTemplate"]["ContainerSpec"].get("Secrets") or []
    if not entries:
        return spec
    by_target = {f.target: f for f in files(profile)}
    out = copy.deepcopy(spec)
    for entry in out["TaskTemplate"]["ContainerSpec"]["Secrets"]:
        data = by_target[entry["File"]["Name"]].data()
        name = secret_name(fleet, data)
        entry["SecretID"], entry["SecretName"] = put(name, data, labels), name
    return out
