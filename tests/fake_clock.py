"""A clock for tests of code that waits: time moves only when the code sleeps."""

from __future__ import annotations


class FakeClock:
    """Callable like ``time.monotonic``; ``sleep`` advances it instead of waiting."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
