"""The baseline options of a session (``--sglang-save`` and friends) and ``compare-fail`` terms.

Apart from the verdicts and the store, so that a session without them imports nothing more.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_sglang.config.options import COMPARE, COMPARE_FAIL, DEFAULT_STORAGE, SAVE, STORAGE
from pytest_sglang.config.parsing import usage_error
from pytest_sglang.config.settings import lookup

if TYPE_CHECKING:
    from pytest_sglang.measure.store import BaselineStore

__all__ = [
    "DEFAULT_CHECKS",
    "NOTHING_COMPARED_OK",
    "BaselineOptions",
    "RegressionCheck",
    "allows_nothing_compared",
    "baseline_options",
    "parse_compare_fail",
]


@dataclass(frozen=True)
class RegressionCheck:
    """One ``compare-fail`` term: a metric and how much worse it may get (a fraction)."""

    metric: str
    tolerance: float

    def describe(self) -> str:
        """Return the term as written: ``output_throughput:3%``."""
        return f"{self.metric}:{100 * self.tolerance:g}%"


#: What ``--sglang-compare`` judges when no ``--sglang-compare-fail`` is given.
DEFAULT_CHECKS = (RegressionCheck("output_throughput", 0.03),)

#: The ``compare-fail`` term that lets a gate pass which compared nothing (a first session,
#: nothing stored yet): without it, a gate with nothing comparable fails.
NOTHING_COMPARED_OK = "nothing-compared:ok"

_TERM = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*:\s*([0-9]*\.?[0-9]+)\s*%?\s*$")


def _metric_name(text: str) -> str:
    """Accept ``ttft.p99`` and pytest-benchmark-style ``ttft_p99``."""
    from pytest_sglang.measure.metrics import metric_spec  # a session with terms only

    try:
        metric_spec(text)
    except KeyError:
        dotted = ".".join(text.rsplit("_", 1))
        with contextlib.suppress(KeyError):
            metric_spec(dotted)
            return dotted
        raise
    return text


def _terms(values: Sequence[str]) -> list[str]:
    return [t.strip() for value in values for t in value.split(",") if t.strip()]


def allows_nothing_compared(values: Sequence[str]) -> bool:
    """Whether the terms hold :data:`NOTHING_COMPARED_OK` (a gate may compare nothing)."""
    return NOTHING_COMPARED_OK in _terms(values)


def parse_compare_fail(values: Sequence[str]) -> tuple[RegressionCheck, ...]:
    """Parse ``METRIC:PCT%`` terms (comma-separated ones too), leaving out ``nothing-compared:ok``.

    :raises ValueError: naming the term and what is accepted.
    """
    from pytest_sglang.measure.metrics import metric_spec

    checks = []
    for term in _terms(values):
        if term == NOTHING_COMPARED_OK:
            continue
        match = _TERM.match(term)
        if match is None:
            raise ValueError(
                f"cannot parse {term!r}: expected METRIC:PCT (percent), e.g. "
                "output_throughput:3% or ttft_p99:10 (a relative change; pytest-benchmark's "
                "absolute 'min:0.001' form does not apply to throughputs), or "
                f"{NOTHING_COMPARED_OK}"
            )
        try:
            metric = _metric_name(match[1])
        except KeyError as exc:
            raise ValueError(f"cannot parse {term!r}: {exc.args[0]}") from None
        if metric_spec(metric).larger_is_better is None:
            raise ValueError(f"{metric!r} describes the load and cannot regress")
        tolerance = float(match[2]) / 100.0
        if not 0.0 <= tolerance < 1.0:
            raise ValueError(f"{term!r}: the tolerance must be in [0%, 100%)")
        checks.append(RegressionCheck(metric, tolerance))
    return tuple(checks)


@dataclass(frozen=True)
class BaselineOptions:
    """The session's baseline options, resolved (``--sglang-save`` and friends)."""

    save: str | None
    autosave: bool
    storage: str
    compare: str | None
    checks: tuple[RegressionCheck, ...]
    #: Whether the checks came from ``--sglang-compare-fail`` (failures fail tests).
    fail: bool
    base: Path
    #: Whether a failing gate may compare nothing (the :data:`NOTHING_COMPARED_OK` term).
    nothing_compared_ok: bool = False

    @property
    def active(self) -> bool:
        """Whether the session saves or compares anything."""
        return bool(self.save or self.autosave or self.compare)

    def store(self) -> BaselineStore:
        """Return the store at the configured storage URI."""
        from pytest_sglang.measure.store import BaselineStore

        return BaselineStore(self.storage, base=self.base)


def baseline_options(config: pytest.Config) -> BaselineOptions:
    """Resolve the baseline options of a session (one precedence: ``config.settings.lookup``).

    :raises pytest.UsageError: on a bad ``compare-fail`` term, storage URI or save name, or
        ``compare-fail`` without ``compare``.
    """
    save, storage, compare, fail = (
        lookup(o, config) for o in (SAVE, STORAGE, COMPARE, COMPARE_FAIL)
    )
    checks: tuple[RegressionCheck, ...] = ()
    allowed = False
    if fail is not None:
        try:
            checks = parse_compare_fail(fail.value)
        except ValueError as exc:
            raise usage_error(
                COMPARE_FAIL, fail.source, str(exc), "the metrics are listed in docs/metrics.md"
            ) from None
        allowed = allows_nothing_compared(fail.value)
        if compare is None:
            raise usage_error(
                COMPARE_FAIL,
                fail.source,
                f"it needs {COMPARE.label}: there is nothing to compare with otherwise",
                f"add {COMPARE.label} (latest, a saved session or a report)",
            )
    uri, base = DEFAULT_STORAGE, Path(config.invocation_params.dir)
    if storage is not None:
        from pytest_sglang.measure.store import BaselineStore  # the one storage-URI rule

        uri, base = storage.value[0], storage.base
        try:
            BaselineStore(uri, base=base)
        except ValueError as exc:
            raise usage_error(STORAGE, storage.source, str(exc), "see docs/baselines.md") from None
    # ``--sglang-save`` alone (or the name ``auto``): an automatic name, commit and time.
    name = save.value[0] if save else None
    if save is not None and name != SAVE.const:
        from pytest_sglang.measure.store import check_save_name

        try:
            check_save_name(save.value[0])
        except ValueError as exc:
            fix = f"or give {SAVE.label} alone for a name of the commit and time"
            raise usage_error(SAVE, save.source, str(exc), fix) from None
    return BaselineOptions(
        save=None if name == SAVE.const else name,
        autosave=name == SAVE.const,
        storage=uri,
        compare=compare.value[0] if compare else None,
        checks=checks or DEFAULT_CHECKS,
        fail=bool(checks),
        base=base,
        nothing_compared_ok=allowed,
    )
