"""Availability of a fleet's endpoint while it changes: a client that sends a small
generation every ``interval_s`` to the replicas' fixed ports in turn, as a client-side
load balancer with failover does (on a refused or failed request it tries the next
replica), with the fleet's API key when it has one. It counts what a user would see: a request is *failed* only when no replica
answered it; ``first_try_errors`` counts the attempts that needed a failover.

Used by the fleet tests (the endpoint must serve throughout a rollout and an abort) and by
``docs/fleet.md``'s figures. Sends to loopback addresses only in the tests."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import requests


@dataclass
class Availability:
    sent: int = 0
    failed: int = 0
    first_try_errors: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return 1.0 if self.sent == 0 else (self.sent - self.failed) / self.sent

    def to_dict(self) -> dict[str, Any]:
        return {
            "sent": self.sent,
            "failed": self.failed,
            "first_try_errors": self.first_try_errors,
            "availability": round(self.ratio, 4),
            "errors": self.errors[:5],
        }


class Prober:
    """``with Prober(endpoints) as p: ...`` then ``p.result``."""

    def __init__(
        self,
        endpoints: list[tuple[str, int]],
        *,
        interval_s: float = 0.05,
        timeout_s: float = 5.0,
        api_key: str | None = None,
    ) -> None:
        self.endpoints = list(endpoints)
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.result = Availability()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kctl-availability", daemon=True)
        self._next = 0
        self._session = requests.Session()
        if api_key is not None:  # a keyed fleet: as a client of it would
            self._session.headers["Authorization"] = f"Bearer {api_key}"

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.timeout_s * len(self.endpoints) + 5)
        self._session.close()

    def _one(self, host: str, port: int) -> str | None:
        body = {
            "input_ids": [1, 2, 3, 4],
            "sampling_params": {"max_new_tokens": 2, "temperature": 0},
        }
        try:
            r = self._session.post(
                f"http://{host}:{port}/generate", json=body, timeout=self.timeout_s
            )
        except requests.RequestException as exc:
            return f"{host}:{port}: {type(exc).__name__}"
        if r.status_code != 200:
            return f"{host}:{port}: HTTP {r.status_code}"
        return None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.result.sent += 1
            errors = []
            for i in range(len(self.endpoints)):
                host, port = self.endpoints[(self._next + i) % len(self.endpoints)]
                error = self._one(host, port)
                if error is None:
                    break
                errors.append(error)
            else:
                self.result.failed += 1
                self.result.errors.append("; ".join(errors))
            self.result.first_try_errors += 1 if errors else 0
            self._next += 1
            time.sleep(self.interval_s)
