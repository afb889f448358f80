"""``kctl.poll.poll_until`` on a fake clock: the looks, the sleeps between them, the deadline,
and an early stop, in process and at once."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from kctl.poll import poll_until


@dataclass
class FakeClock:
    now: float = 100.0
    slept: list[float] = field(default_factory=list)

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Late(Exception):
    pass


def test_returns_the_first_look_that_is_done_sleeping_between_looks() -> None:
    clock = FakeClock()
    looks: list[float] = []

    def look() -> int:
        looks.append(clock())
        return len(looks)

    got = poll_until(
        look, lambda n: n == 3, deadline_s=10, interval_s=0.5, clock=clock, sleep=clock.sleep,
        timed_out=lambda n: Late(n),
    )  # fmt: skip
    assert got == 3
    assert looks == [100.0, 100.5, 101.0]
    assert clock.slept == [0.5, 0.5]


def test_done_at_once_never_sleeps() -> None:
    clock = FakeClock()
    got = poll_until(
        lambda: "ready", lambda s: s == "ready", deadline_s=0, interval_s=1, clock=clock,
        sleep=clock.sleep, timed_out=lambda s: Late(s),
    )  # fmt: skip
    assert got == "ready" and clock.slept == []


def test_past_the_deadline_raises_what_timed_out_makes_of_the_last_look() -> None:
    clock = FakeClock()
    looks: list[float] = []

    def look() -> float:
        looks.append(clock())
        return clock()

    with pytest.raises(Late) as err:
        poll_until(
            look, lambda _: False, deadline_s=2, interval_s=0.5, clock=clock,
            sleep=clock.sleep, timed_out=lambda seen: Late(f"last look at {seen}"),
        )  # fmt: skip
    # it looks at 100.0 ... 102.0 (not yet past the deadline), and once more at 102.5
    assert looks == [100.0, 100.5, 101.0, 101.5, 102.0, 102.5]
    assert str(err.value) == "last look at 102.5"
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_slow_looks_count_against_the_deadline() -> None:
    clock = FakeClock()
    looks = 0

    def look() -> None:
        nonlocal looks
        looks += 1
        clock.now += 3  # a look that takes 3 s

    with pytest.raises(Late):
        poll_until(
            look, lambda _: False, deadline_s=5, interval_s=0.5, clock=clock,
            sleep=clock.sleep, timed_out=lambda _: Late(),
        )  # fmt: skip
    assert looks == 2 and clock.slept == [0.5]


def test_an_error_from_look_or_done_ends_the_wait_at_once_unchanged() -> None:
    clock = FakeClock()

    def look() -> int:
        raise KeyError("gone")

    with pytest.raises(KeyError, match="gone"):
        poll_until(
            look, lambda _: False, deadline_s=5, interval_s=0.5, clock=clock,
            sleep=clock.sleep, timed_out=lambda _: Late(),
        )  # fmt: skip

    seen: list[int] = []

    def done(n: int) -> bool:
        seen.append(n)
        if len(seen) == 2:
            raise ValueError("the replica died")
        return False

    with pytest.raises(ValueError, match="the replica died"):
        poll_until(
            lambda: len(seen), done, deadline_s=5, interval_s=0.5, clock=clock,
            sleep=clock.sleep, timed_out=lambda _: Late(),
        )  # fmt: skip
    assert seen == [0, 1] and clock.slept == [0.5]
