"""Docker runtime: the serving process is a container, run the way SGLang documents it
(host network, ``ipc=host``, shm size, GPU device requests, memlock ulimit).

The plan is data: :func:`run_spec` turns a :class:`LaunchSpec` and the profile's
:class:`RuntimeSpec` into the keyword arguments of ``containers.create`` (``kctl plan``
shows them, tests compare them by equality). :class:`DockerRuntime` is the only place that
acts on them. It owns exactly the containers labelled ``kctl.managed=true`` and never
touches any other container.

Stopped containers are kept: rollback restarts the known-good one when its spec hash is
unchanged, which skips a container re-create (the model load remains). :meth:`prune`
removes stopped ones beyond a retention count.

Modules: :mod:`.spec` (the run spec, pure), :mod:`.engine` (connecting, error
translation), :mod:`.runtime` (:class:`DockerRuntime`). The ``docker`` SDK is imported
lazily, inside functions: ``kctl --help`` must not pay for it.
"""

from kctl.runtime.docker.engine import REMEDY, connect, engine_errors
from kctl.runtime.docker.runtime import DockerRuntime
from kctl.runtime.docker.spec import (
    LABEL_DEPLOYMENT,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_PORT,
    LABEL_PROFILE,
    LABEL_PROFILE_HASH,
    LABEL_SPEC_HASH,
    container_name,
    device_requests,
    plan_run_spec,
    run_spec,
    spec_hash,
)

__all__ = [
    "LABEL_DEPLOYMENT",
    "LABEL_MANAGED",
    "LABEL_OWNER",
    "LABEL_PORT",
    "LABEL_PROFILE",
    "LABEL_PROFILE_HASH",
    "LABEL_SPEC_HASH",
    "REMEDY",
    "DockerRuntime",
    "connect",
    "container_name",
    "device_requests",
    "engine_errors",
    "plan_run_spec",
    "run_spec",
    "spec_hash",
]
