"""The baseline options of a session (``--sglang-save`` and friends) and ``compare-fail`` terms.

Resolved here, apart from the verdicts and the store, so that a session without any of them
imports nothing more (``pytest_configure`` runs in every session).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_sglang.config.options import AUTOSAVE, COMPARE, COMPARE_FAIL, SAVE, STORAGE
from pytest_sglang.config.options import OptionSpec as _OptionSpec

if TYPE_CHECKING:
    from pytest_sglang.measure.store import BaselineStore

__all__ = [
    "DEFAULT_CHECKS",
    "DEFAULT_STORAGE",
    "NOTHING_COMPARED_OK",
    "BaselineOptions",
    "RegressionCheck",
    "allows_nothing_compared",
    "baseline_options",
    "parse_compare_fail",
]

#: pytest-benchmark's default storage, so that ``pytest-benchmark list`` finds ours too.
DEFAULT_STORAGE = "file://./.benchmarks"


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
        return text
    except KeyError:
        base, _, stat = text.rpartition("_")
        if base and stat:
            dotted = f"{base}.{stat}"
            try:
                metric_spec(dotted)
                return dotted
            except KeyError:
                pass
        raise


def _terms(values: Sequence[str]) -> list[str]:
    return [t.strip() for value in values for t in value.split(",") if t.strip()]


def allows_nothing_compared(values: Sequence[str]) -> bool:
    """Whether the terms hold :data:`NOTHING_COMPARED_OK` (a gate may compare nothing)."""
    return NOTHING_COMPARED_OK in _terms(values)


def parse_compare_fail(values: Sequence[str]) -> tuple[RegressionCheck, ...]:
    """Parse ``METRIC:PCT%`` terms (each value may hold several, comma-separated).

    :data:`NOTHING_COMPARED_OK` is accepted and left out (:func:`allows_nothing_compared`).

    :raises ValueError: naming the term and what is accepted.
    """
    checks = []
    for value in values:
        for term in (t for t in value.split(",") if t.strip()):
            if term.strip() == NOTHING_COMPARED_OK:
                continue
            match = _TERM.match(term)
            if match is None:
                raise ValueError(
                    f"cannot parse {term.strip()!r}: expected METRIC:PCT (percent), e.g. "
                    "output_throughput:3% or ttft_p99:10 (a relative change; pytest-benchmark's "
                    "absolute 'min:0.001' form does not apply to throughputs), or "
                    f"{NOTHING_COMPARED_OK}"
                )
            name, pct = match.groups()
            try:
                metric = _metric_name(name)
            except KeyError as exc:
                raise ValueError(f"cannot parse {term.strip()!r}: {exc.args[0]}") from None
            from pytest_sglang.measure.metrics import metric_spec

            if metric_spec(metric).larger_is_better is None:
                raise ValueError(f"{metric!r} describes the load and cannot regress")
            tolerance = float(pct) / 100.0
            if not 0.0 <= tolerance < 1.0:
                raise ValueError(f"{term.strip()!r}: the tolerance must be in [0%, 100%)")
            checks.append(RegressionCheck(metric, tolerance))
    return tuple(checks)


# -- options ------------------------------------------------------------------------------


def _option(config: pytest.Config, spec: _OptionSpec) -> tuple[Any, str]:
    """Return (value, source) of one option: command line > environment > ini > default."""
    value = config.getoption(spec.dest, None)
    if value not in (None, []):
        return value, f"command line ({spec.cli})"
    env = os.environ.get(spec.env)
    if env:
        if spec.flag:
            return env.strip().lower() in ("1", "true", "yes", "on"), f"environment ({spec.env})"
        return (env.split() if spec.repeatable else env), f"environment ({spec.env})"
    try:
        ini = config.getini(spec.ini)
    except ValueError:
        ini = None
    if ini:
        where = f"ini ({spec.ini})"
        if spec.flag:
            return str(ini).strip().lower() in ("1", "true", "yes", "on"), where
        return ini, where
    return None, "default"


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
    """Resolve the baseline options of a session.

    :raises pytest.UsageError: on a bad ``compare-fail`` term or storage URI, or
        ``compare-fail`` without ``compare``.
    """
    save, _ = _option(config, SAVE)
    autosave, _ = _option(config, AUTOSAVE)
    storage, storage_source = _option(config, STORAGE)
    compare_ref, _ = _option(config, COMPARE)
    terms, terms_source = _option(config, COMPARE_FAIL)
    if isinstance(terms, str):
        terms = terms.splitlines()
    try:
        checks = parse_compare_fail(list(terms or []))
    except ValueError as exc:
        raise pytest.UsageError(f"{COMPARE_FAIL.cli} from {terms_source}: {exc}") from None
    allowed = allows_nothing_compared(list(terms or []))
    if (checks or allowed) and not compare_ref:
        raise pytest.UsageError(
            f"{COMPARE_FAIL.cli} needs {COMPARE.cli} (latest, a saved session, or a report): "
            "there is nothing to compare with otherwise"
        )
    base = Path(config.invocation_params.dir)
    if storage_source.startswith("ini") and config.inipath is not None:
        base = Path(config.inipath).parent
    options = BaselineOptions(
        save=str(save) if save else None, autosave=bool(autosave),
        storage=str(storage or DEFAULT_STORAGE), compare=str(compare_ref) if compare_ref else None,
        checks=checks or DEFAULT_CHECKS, fail=bool(checks), base=base,
        nothing_compared_ok=allowed,
    )  # fmt: skip
    uri = options.storage
    if "://" in uri and not uri.startswith(("file://", "elasticsearch+http")):
        raise pytest.UsageError(
            f"{STORAGE.cli} from {storage_source}: {uri!r} is not file://PATH or "
            "elasticsearch+http[s]://host1,host2/index/doctype?project_name=NAME"
        )
    return options
