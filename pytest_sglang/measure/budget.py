"""What a call of ``sglang_bench`` asks and allows, and what breaks the measurement it gets.

Arguments are checked before anything runs; a :class:`Budget` (``allow_errors``,
``allow_checks``) says what may fail, and the messages here say why a measurement broke it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_sglang.loadgen.schedule import Arrival, OpenLoop
from pytest_sglang.measure.checks import CHECK_NAMES, LOAD_CHECKS, failure_kinds

if TYPE_CHECKING:
    from pytest_sglang.loadgen.workload import Workload
    from pytest_sglang.measure.results import BenchResult

__all__ = ["Budget", "broken_message", "check_fills", "levels_of", "open_loop_of", "repeats_of"]


def _wrong(name: str, wanted: str, value: object, example: str, whole: object = None) -> str:
    """Return ``NAME must be WANTED, got TYPE VALUE [in WHOLE]; write e.g. EXAMPLE``."""
    within = f" in {whole!r}" if whole is not None else ""
    return (
        f"{name} must be {wanted}, got {type(value).__name__} {value!r}{within}; "
        f"write e.g. {example}"
    )


def _count(name: str, value: object, wanted: str, example: str, whole: object = None) -> int:
    """Return ``value`` if it is a whole number of at least 1 (a bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(_wrong(name, wanted, value, example, whole))
    if value < 1:
        raise ValueError(_wrong(name, wanted, value, example, whole))
    return value


def levels_of(concurrency: object) -> list[int]:
    """Return the concurrency levels a call asks for (one, or a list of distinct ones)."""
    wanted = "a positive int or a list of them"
    example = "concurrency=8 or concurrency=[1, 8, 64]"
    if not isinstance(concurrency, list | tuple | range):
        return [_count("concurrency", concurrency, wanted, example)]
    if not concurrency:
        raise ValueError(_wrong("concurrency", wanted, concurrency, example))
    levels = [_count("concurrency", c, wanted, example, concurrency) for c in concurrency]
    if len(set(levels)) != len(levels):
        raise ValueError(f"concurrency levels must be distinct, got {concurrency!r}")
    return levels


def repeats_of(repeats: object) -> int:
    """Return how many runs a call asks for."""
    return _count("repeats", repeats, "a whole number of runs >= 1", "repeats=5")


def check_fills(workload: Workload, concurrency: int) -> None:
    """Refuse a closed loop whose workload can never hold ``concurrency`` requests in flight."""
    sent = workload.for_concurrency(concurrency).requests
    if sent < concurrency:
        raise ValueError(
            f"a run at concurrency {concurrency} with {sent} requests can never hold "
            f"{concurrency} requests in flight; give the workload requests >= "
            f"{concurrency}, or requests_per_slot (e.g. requests_per_slot=2) to scale "
            "the requests with the level"
        )


def open_loop_of(
    concurrency: object, rate: float | None, arrival: Arrival, max_concurrency: int | None
) -> OpenLoop | None:
    """Return the open loop a call asks for (``rate``), or None for a closed loop.

    ``concurrency`` is None where the call gave none: a closed loop's concurrency and an open
    loop's rate exclude each other; an open loop's cap is ``max_concurrency``.
    """
    if rate is None and max_concurrency is not None:
        raise ValueError(
            "max_concurrency caps an open loop: give its rate too, e.g. "
            "sglang_bench(server, workload, rate=20.0, max_concurrency=64)"
        )
    if rate is not None and concurrency is not None:
        raise ValueError(
            f"give concurrency (a closed loop) or rate (an open loop), not both (got "
            f"concurrency={concurrency!r}, rate={rate!r}); cap the requests an open loop "
            "keeps in flight with max_concurrency"
        )
    return None if rate is None else OpenLoop(rate, arrival, max_concurrency)


@dataclass(frozen=True)
class Budget:
    """What a call allows: a fraction of each run's requests failing, and named checks."""

    errors: float = 0.0
    checks: frozenset[str] = frozenset()

    @classmethod
    def of(cls, allow_errors: object, allow_checks: object = ()) -> Budget:
        """Return the budget of a call's ``allow_errors`` and ``allow_checks``."""
        wanted = "between 0 and 1 (the fraction of each run's requests that may fail)"
        if not isinstance(allow_errors, int | float) or isinstance(allow_errors, bool):
            raise TypeError(_wrong("allow_errors", wanted, allow_errors, "allow_errors=0.05"))
        if not 0.0 <= allow_errors <= 1.0:
            raise ValueError(_wrong("allow_errors", wanted, allow_errors, "allow_errors=0.05"))
        if isinstance(allow_checks, str) or not isinstance(allow_checks, Iterable):
            wanted, example = "a list of validity check names", 'allow_checks=["token_counts"]'
            raise TypeError(_wrong("allow_checks", wanted, allow_checks, example))
        checks = frozenset(allow_checks)
        for name in sorted(checks - set(CHECK_NAMES), key=str):
            raise ValueError(
                f"allow_checks: no validity check {name!r}; the checks are "
                f"{', '.join(CHECK_NAMES)} (docs/metrics.md, 'Validity checks')"
            )
        return cls(float(allow_errors), checks)


def broken_message(result: BenchResult, budget: Budget) -> str | None:
    """Return why ``result`` breaks ``budget``: failed requests, impossible counts, checks.

    The error budget judges ``no_failed_requests``, the verdicts judge ``LOAD_CHECKS``; the
    first of the three a run breaks is the message.
    """
    measurement = f"the measurement of {result.label()} ({result.url})"
    runs = list(enumerate(result.runs, 1))
    over = [
        (i, run) for i, run in runs if run.requests and run.failed / run.requests > budget.errors
    ]
    if over:
        allowed = (
            "no failed request is allowed"
            if budget.errors == 0
            else f"at most {budget.errors:.1%} of each run's requests may fail"
        )
        failed = sum(run.failed for _, run in over)
        requests = sum(run.requests for _, run in over)
        each = ", ".join(f"run {i}: {run.failed} of {run.requests}" for i, run in over)
        return "\n".join(
            [
                f"{measurement} is broken: {failed} of {requests} measured requests failed "
                f"({each}); {allowed}",
                *failure_kinds([r for _, run in over for r in run.records]),
                "  fix: find out why the server failed them (its log); if failures are expected, "
                "allow them: sglang_bench(..., allow_errors=0.05)",
            ]
        )
    for i, run in runs:
        bad = [r for r in run.records if min(r.output_tokens or 0, r.prompt_tokens or 0) < 0]
        if bad or run.output_tokens < 0 or run.input_tokens < 0:
            example = (
                f" (e.g. request {bad[0].index}: completion_tokens {bad[0].output_tokens}, "
                f"prompt_tokens {bad[0].prompt_tokens})"
                if bad
                else ""
            )
            return (
                f"{measurement} is broken: run {i}: the server reported negative token counts "
                f"for {len(bad)} requests{example}; its throughput "
                f"({run.output_throughput:.1f} tok/s) means nothing: check the server (or a "
                "proxy in between) and its usage reporting"
            )
    skip = budget.checks | LOAD_CHECKS | {"no_failed_requests"}
    invalid = [
        (i, check)
        for i, run in runs
        for check in run.checks
        if check.passed is False and check.name not in skip
    ]
    if not invalid:
        return None
    names = list(dict.fromkeys(check.name for _, check in invalid))
    quoted = ", ".join(f'"{name}"' for name in names)
    return "\n".join(
        [
            f"{measurement} is invalid: a validity check failed ({', '.join(names)}), so its "
            "figures are not what the workload asked for",
            *(f"  run {i}: {check.name}: {check.detail}" for i, check in invalid),
            "  fix: find out why (docs/metrics.md, 'Validity checks'); if the server is known "
            f"to fail it and the figures still serve, allow it: sglang_bench(..., "
            f"allow_checks=[{quoted}])",
        ]
    )
