"""The simulated orchestrator's reconciliation: what Swarm's manager does in the background,
done here in one :func:`tick` each time a kctl command looks at the fleet (it has no daemon:
between two kctl commands nothing moves; the next command catches up on the time that
passed). Acts on the state of :mod:`kctl.fleet.simstate` and on local processes.

Per tick, for every service:

1. **observe** each task: a process that exited is ``failed`` (``complete`` on exit 0); a
   ``starting`` task is ``running`` once ``GET /health`` answers 200, ``failed``
   ("unhealthy container") when it has not by the health check's start period plus its
   retries; a task whose stop a killed kctl left half done is stopped now;
2. **update** (Swarm's updater): while the service updates or rolls back, replace
   ``Parallelism`` outdated slots a batch, stop-first, those that serve nothing first (a
   slot the restart policy is bringing back counts as a batch of its own); a batch is done when all its tasks run
   and stayed so for the ``Monitor`` window (``Delay`` if longer); any of them failing is the
   update's failure: ``FailureAction`` rollback swaps the spec back to the previous one
   (``rollback_started``), a failure while rolling back pauses (``rollback_paused``);
3. **restart** (the restart policy): a slot whose task died outside an update batch gets a
   new task of the service's spec after the policy's delay, when its condition is ``any``.

Times in the spec are divided by the replicas' ``KCTL_SIM_SPEEDUP`` (time compressed as the
simulator's own). Starting a task records it first (``preparing``), so a kctl killed between
the record and the process leaves a task the next tick marks failed (and restarts).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kctl.errors import KctlError
from kctl.fleet.service import ENV_PORT_BASE, LABEL_DEPLOYMENT
from kctl.fleet.swarmsecrets import ENV_CONFIG_SECRET, ENV_FILE_PREFIX, ENV_SECRET_VARS
from kctl.launch import rebind
from kctl.profile.model import SecretRef
from kctl.runtime.base import Instance, LaunchSpec
from kctl.runtime.local import LocalRuntime
from kctl.statedir import ensure_dir, open_fd, write_new

NS = 1e9
DEAD = ("failed", "complete", "shutdown", "rejected")
LIVE = ("preparing", "starting", "running")
Task = dict[str, Any]
Service = dict[str, Any]


def env_of(spec: dict[str, Any]) -> dict[str, str]:
    container = spec["TaskTemplate"]["ContainerSpec"]
    return dict(str(e).split("=", 1) for e in container.get("Env") or [] if "=" in str(e))


def speed(spec: dict[str, Any]) -> float:
    return max(1.0, float(env_of(spec).get("KCTL_SIM_SPEEDUP", "1") or 1))


def slot_hash(svc: Service, slot: int) -> str:
    """What a slot's task must have been started from to be up to date."""
    fault = svc["faults"].get(str(slot), "")
    blob = json.dumps([svc["spec"]["TaskTemplate"], fault], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def current(state: dict[str, Any], role: str) -> dict[int, Task]:
    """Per slot, the task the orchestrator wants running, else the newest."""
    out: dict[int, Task] = {}
    for t in state["tasks"]:
        if t["role"] != role:
            continue
        best = out.get(t["slot"])
        if best is None or (t["desired"] == "running", t["seq"]) > (
            best["desired"] == "running",
            best["seq"],
        ):
            out[t["slot"]] = t
    return out


def instance(t: Task) -> Instance:
    return Instance(runtime="local", deployment_id=t["id"], ref=t["ref"], port=t["port"])


class Orchestrator:
    """One tick's worth of the manager's work over ``state``; ``persist`` saves it (an
    intent is recorded before each process is started)."""

    def __init__(
        self,
        state: dict[str, Any],
        rt: LocalRuntime,
        now: float,
        persist: Callable[[], None],
        secrets_dir: Path | None = None,
    ) -> None:
        self.state, self.rt, self.now, self.persist = state, rt, now, persist
        #: the simulated secret store (:meth:`kctl.fleet.simfleet.SimulatedFleet.put_secret`)
        self.secrets_dir = secrets_dir

    def _mount_secrets(self, task_id: str, mounts: list[dict[str, Any]]) -> Path:
        """Swarm's ``/run/secrets`` for one task: each secret the spec names, copied from
        the store under its file name (0600 in a 0700 directory of the state dir)."""
        if self.secrets_dir is None:
            raise KctlError("internal: a spec with secrets and no simulated secret store")
        here = ensure_dir(self.secrets_dir / "run" / task_id)
        for mount in mounts:
            write_new(here / mount["File"]["Name"], _read(self.secrets_dir / mount["SecretName"]))
        return here

    def _by_reference(
        self, env: dict[str, str], here: Path
    ) -> tuple[tuple[tuple[str, SecretRef], ...], SecretRef | None]:
        """The task's mounted secrets as references to its files, for the local runtime,
        in place of the start wrapper's reading them (its variables taken out of ``env``):
        the runtime sets the variables, writes the key's ``--config`` and takes the values
        out of the replica's log, as for a server on one host. Swarm's replica log is
        Docker's and keeps what SGLang writes (its ``server_args`` line, key included)."""
        names = [n for n in env.pop(ENV_SECRET_VARS, "").split(",") if n]
        refs = tuple((n, SecretRef(file=str(here / f"{ENV_FILE_PREFIX}{n}"))) for n in names)
        config = env.pop(ENV_CONFIG_SECRET, "")
        if not config:
            return refs, None
        key = str(json.loads(_read(here / config))["api-key"])
        write_new(here / "api-key", key.encode())
        return refs, SecretRef(file=str(here / "api-key"))

    # -- tasks ---------------------------------------------------------------------------

    def start(self, role: str, svc: Service, slot: int) -> Task:
        spec = svc["spec"]
        container = spec["TaskTemplate"]["ContainerSpec"]
        env = {k: v.replace("{{.Task.Slot}}", str(slot)) for k, v in env_of(spec).items()}
        fault = svc["faults"].get(str(slot))
        if fault:
            env["KCTL_SIM_FAULT"] = ",".join(filter(None, (env.get("KCTL_SIM_FAULT"), fault)))
        port = int(env[ENV_PORT_BASE]) + slot - 1
        self.state["seq"] = self.state.get("seq", 0) + 1
        task_id = f"{spec['Name']}.{slot}.{uuid.uuid4().hex[:10]}"
        secrets: tuple[tuple[str, SecretRef], ...] = ()
        key: SecretRef | None = None
        if mounts := container.get("Secrets"):
            secrets, key = self._by_reference(env, self._mount_secrets(task_id, mounts))
        task: Task = {
            "id": task_id, "role": role, "slot": slot,
            "seq": self.state["seq"], "hash": slot_hash(svc, slot), "labels": dict(container["Labels"]),
            "image": container["Image"], "args": list(container["Args"]), "port": port,
            "state": "preparing", "desired": "running", "error": "", "ref": "",
            "started": self.now, "since": self.now, "speed": speed(spec),
            "start_period": spec["TaskTemplate"]["ContainerSpec"]["Healthcheck"]["StartPeriod"] / NS,
            "grace": container.get("StopGracePeriod", 10 * NS) / NS,
        }  # fmt: skip
        self.state["tasks"].append(task)
        self.persist()
        # the image's python3 is this interpreter: the replica runs the service's own
        # start wrapper, which gives the slot its port and execs the server; every simulated
        # replica runs on this host, so it binds loopback whatever the fleet file's bind
        launch = LaunchSpec(
            deployment_id=task["id"], profile_name=task["labels"].get("kctl.profile", ""),
            profile_hash=task["labels"].get("kctl.profile-hash", ""),
            argv=(sys.executable, *container["Command"][1:], *rebind(container["Args"], "127.0.0.1")),
            env=tuple(sorted(env.items())), host="127.0.0.1", port=port,
            secrets=secrets, api_key=key,
        )  # fmt: skip
        try:
            task["ref"] = self.rt.start(launch).ref
            task["state"] = "starting"
        except Exception as exc:  # noqa: BLE001 - a task that cannot start is a failed task
            self._fail(task, f"task: cannot start: {exc}")
        self.persist()
        return task

    def stop(self, task: Task) -> None:
        if task["state"] in DEAD and task["desired"] == "shutdown":
            return
        task["desired"] = "shutdown"
        self.persist()
        if task["ref"]:
            self.rt.stop(instance(task), task["grace"] / task["speed"] + 1)
        if task["state"] not in DEAD:
            task["state"], task["since"] = "shutdown", self.now

    def _fail(self, task: Task, error: str, state: str = "failed") -> None:
        task["state"], task["error"], task["since"] = state, error, self.now
        task["desired"] = "shutdown"

    def observe(self, task: Task) -> None:
        if task["desired"] != "running":
            if task["state"] not in DEAD:
                self.stop(task)
            return
        if task["state"] not in LIVE:
            return
        if task["state"] == "preparing":
            self._fail(task, "task: never started (kctl stopped while starting it)")
            return
        st = self.rt.state(instance(task))
        if not st.running:
            code = st.exit_code
            if code == 0:
                self._fail(task, "", "complete")
            else:
                self._fail(task, f"task: non-zero exit ({code if code is not None else '?'})")
        elif task["state"] == "starting":
            if _healthy(task["port"]):
                task["state"], task["since"] = "running", self.now
            elif (self.now - task["started"]) * task["speed"] > task["start_period"] + 3:
                self.rt.stop(instance(task), 2)
                self._fail(task, "task: unhealthy container")

    # -- services ------------------------------------------------------------------------

    def tick(self) -> None:
        for t in list(self.state["tasks"]):
            self.observe(t)
        for role, svc in self.state["services"].items():
            self.update(role, svc)
            self.restart(role, svc)
        # forget what is long gone: the dead tasks of a slot beyond its newest few
        keep = {t["id"] for t in self.state["tasks"] if t["state"] not in DEAD}
        for role in self.state["services"]:
            keep |= {t["id"] for t in current(self.state, role).values()}
        self.state["tasks"] = [t for t in self.state["tasks"] if t["id"] in keep]

    def update(self, role: str, svc: Service) -> None:
        upd = svc["update"]
        if upd["state"] not in ("updating", "rollback_started"):
            return
        back = upd["state"] == "rollback_started"
        cfg = svc["spec"]["RollbackConfig" if back else "UpdateConfig"]
        now_on = current(self.state, role)
        if upd["batch"]:
            batch = [now_on.get(s) for s in upd["batch"]]
            bad = [t for t in batch if t is None or t["state"] in DEAD]
            if bad:
                self._failure(svc, bad[0], back)
                return
            if not all(t is not None and t["state"] == "running" for t in batch):
                return
            upd["healthy_at"] = upd["healthy_at"] or self.now
            window = max(cfg["Monitor"], cfg["Delay"]) / NS / speed(svc["spec"])
            if self.now - upd["healthy_at"] < window:
                return
            upd["batch"], upd["healthy_at"] = [], None
        slots = range(1, svc["spec"]["Mode"]["Replicated"]["Replicas"] + 1)
        fresh = [s for s in slots if s in now_on and now_on[s]["hash"] == slot_hash(svc, s)]
        starting = [s for s in fresh if now_on[s]["state"] in ("preparing", "starting")]
        if starting:  # a restarted slot counts as a batch: wait for it before the next
            upd["batch"] = starting
            return
        # slots that serve nothing go first: replacing them costs no availability
        outdated = sorted(
            (s for s in slots if s not in fresh),
            key=lambda s: (s in now_on and now_on[s]["state"] == "running", s),
        )
        if not outdated:
            upd["state"] = "rollback_completed" if back else "completed"
            upd["message"] = "rollback completed" if back else "update completed"
            return
        upd["batch"] = outdated[: cfg["Parallelism"] or len(outdated)]
        self.persist()
        for s in upd["batch"]:  # stop-first: the slot keeps its port
            if s in now_on:
                self.stop(now_on[s])
            self.start(role, svc, s)

    def _failure(self, svc: Service, task: Task | None, back: bool) -> None:
        upd = svc["update"]
        who = f"task {task['id']}" if task else "a task"
        if not back and svc["spec"]["UpdateConfig"]["FailureAction"] == "rollback":
            swap_to_previous(svc)
            upd["state"] = "rollback_started"
            upd["message"] = f"update rolled back due to failure or early termination of {who}"
        else:
            upd["state"] = "rollback_paused" if back else "paused"
            upd["message"] = f"update paused due to failure or early termination of {who}"
        upd["batch"], upd["healthy_at"] = [], None

    def restart(self, role: str, svc: Service) -> None:
        policy = svc["spec"]["TaskTemplate"]["RestartPolicy"]
        replicas = svc["spec"]["Mode"]["Replicated"]["Replicas"]
        now_on = current(self.state, role)
        for s in range(1, replicas + 1):
            t = now_on.get(s)
            if s in svc["update"]["batch"] or (t is not None and t["state"] not in DEAD):
                continue
            if t is not None and policy.get("Condition") != "any":
                continue  # the canary: a dead task stays dead
            delay = policy.get("Delay", NS) / NS / speed(svc["spec"])
            if t is None or self.now - t["since"] >= delay:
                self.start(role, svc, s)


def swap_to_previous(svc: Service) -> None:
    """The service's spec becomes its previous one, and the other way round (Swarm's
    rollback keeps the spec it left as the new previous spec)."""
    svc["spec"], svc["previous"] = svc["previous"], svc["spec"]
    svc["faults"], svc["previous_faults"] = svc["previous_faults"], svc["faults"]
    svc["version"] += 1


def _read(path: Path) -> bytes:
    with os.fdopen(open_fd(path, os.O_RDONLY), "rb") as fh:
        return fh.read()


def deployment_of(spec: dict[str, Any] | None) -> str:
    return "" if spec is None else str(spec["Labels"].get(LABEL_DEPLOYMENT, ""))


def _healthy(port: int) -> bool:
    """The service's health check: SGLang's ``GET /health`` answers 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return int(r.status) == 200
    except (OSError, ValueError):
        return False
