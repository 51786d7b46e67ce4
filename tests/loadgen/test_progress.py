from __future__ import annotations

import asyncio
import time

import pytest

from pytest_sglang.loadgen.progress import ProgressTicker, Tally, no_progress


def test_ticker_reports_periodically_and_once_at_the_end() -> None:
    calls: list[tuple[int, int, int, float]] = []
    tally = Tally(total=10)

    async def run() -> float:
        two_reports = asyncio.Event()

        def report(done: int, total: int, output_tokens: int, elapsed: float) -> None:
            calls.append((done, total, output_tokens, elapsed))
            if len(calls) >= 2:
                two_reports.set()

        started = time.perf_counter()
        ticker = ProgressTicker(report, tally, started, 0.05)
        ticker.start()
        for _ in range(10):
            tally.done += 1
            tally.tokens += 7
            await asyncio.sleep(0.02)
        await asyncio.wait_for(two_reports.wait(), 30)  # two periodic reports
        await ticker.stop()
        return time.perf_counter() - started

    elapsed = asyncio.run(run())
    assert calls[-1][:3] == (10, 10, 70)
    # Periodic, and at most one report per interval (however slow the machine): not one per
    # request or token.
    assert 3 <= len(calls) <= elapsed / 0.05 + 2
    assert [c[3] for c in calls] == sorted(c[3] for c in calls)


def test_a_failing_callback_is_disabled_with_a_warning() -> None:
    def broken(done: int, total: int, output_tokens: int, elapsed: float) -> None:
        raise RuntimeError("display broke")

    async def run() -> None:
        ticker = ProgressTicker(broken, Tally(1), time.perf_counter(), 0.01)
        ticker.start()
        await asyncio.sleep(0.05)
        await ticker.stop()

    with pytest.warns(RuntimeWarning, match="display broke"):
        asyncio.run(run())


def test_no_progress_starts_no_task() -> None:
    async def run() -> None:
        ticker = ProgressTicker(no_progress, Tally(1), 0.0)
        ticker.start()
        assert ticker._task is None
        await ticker.stop()

    asyncio.run(run())
