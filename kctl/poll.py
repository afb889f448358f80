"""Waiting by looking again: :func:`poll_until` looks, judges what it saw, sleeps a fixed
interval and looks again until the judgement is yes or the deadline has passed (tenacity,
with the clock and the sleep injected, so tests pass fake ones).

The health wait keeps its own retry with backoff (:mod:`kctl.health`); the waits that
look at a fixed interval (a fleet settling, a canary, the waves, a stopping process) use
this one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryCallState, RetryError, Retrying, retry_if_result, wait_fixed

T = TypeVar("T")


def poll_until(
    look: Callable[[], T],
    done: Callable[[T], bool],
    *,
    deadline_s: float,
    interval_s: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    timed_out: Callable[[T], BaseException],
) -> T:
    """Call ``look`` until ``done`` says yes to what it returned, and return that.

    After a look that is not done, the wait ends when ``clock`` has passed ``deadline_s``
    seconds from the first look: ``timed_out`` of the last look is raised. Otherwise it
    sleeps ``interval_s`` and looks again. An exception from ``look`` or ``done`` (the
    caller giving up early, e.g. on a dead replica) ends the wait at once, unchanged."""
    end = clock() + deadline_s

    def past_deadline(_: RetryCallState) -> bool:
        return clock() > end

    retrying = Retrying(
        retry=retry_if_result(lambda seen: not done(seen)),
        stop=past_deadline,
        wait=wait_fixed(interval_s),
        sleep=sleep,
        reraise=True,
    )
    try:
        return retrying(look)
    except RetryError as exc:
        raise timed_out(exc.last_attempt.result()) from None
