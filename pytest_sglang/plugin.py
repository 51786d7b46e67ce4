"""pytest-sglang's pytest11 entry point: options and hooks; the fixtures live in ``fixtures.py``.

Work (network, processes) happens in fixtures, never here: ``pytest --help`` and
``--collect-only`` run ``pytest_configure`` too. A session that sets nothing of ours imports
no settings or reporter until a test uses them: the plugin costs every pytest run little.

Ctrl-C and SIGTERM (:class:`SessionInterrupts`): an interrupted session keeps what it
measured and stops what it started. CI cancels a job with SIGTERM, which would end pytest on
the spot, writing nothing. Here SIGTERM runs the SIGINT handler (its ``KeyboardInterrupt``
cancels a load run, which keeps its finished part: ``loadgen/runner.py``); the test it cut
short is reported with what it recorded; what the session started stops before its outputs
are written; a second interrupt kills the session's servers at once (SIGKILL) and raises
nothing, so that the teardown still writes the outputs. A Ctrl-C or SIGTERM during the
readiness gate is held and raised between its steps (``server/probing.held_interrupts``),
where nothing can drop it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Generator
from types import FrameType
from typing import TYPE_CHECKING, Any, Literal

import pytest

from pytest_sglang import fixtures
from pytest_sglang.config.options import OPTIONS, anything_set
from pytest_sglang.markers import (
    MARKERS,
    UNMET_KEY,
    evaluate_requirements,
    gpu_snapshot,
    order_by_profile,
    parametrize_over_servers,
    servers_named,
    validate_markers,
)

if TYPE_CHECKING:
    from pytest_sglang.config.settings import Settings
    from pytest_sglang.report.collector import SGLangReporter
    from pytest_sglang.report.junit import EntryLedger
    from pytest_sglang.server.handle import LaunchInfo
    from pytest_sglang.server.pool import ServerPool

#: Whether the session set anything of ours, so that ``pytest_configure`` resolved the settings.
SET_KEY = pytest.StashKey[bool]()
#: What the session's pytest-xdist workers launched (``worker``, ``records``, ``lines``).
WORKERS_KEY = pytest.StashKey[list[dict[str, Any]]]()


@pytest.hookimpl
def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the ``sglang`` options and every setting's ini key (``config/options.py``)."""
    group = parser.getgroup("sglang", "SGLang server testing (docs/guide.md#options)")
    for spec in OPTIONS:
        how: dict[str, Any] = {"action": "store_true"}
        if not spec.flag:
            how = {"action": "append" if spec.repeatable else "store", "metavar": spec.metavar}
        if spec.const is not None:
            how |= {"nargs": "?", "const": spec.const}
        if spec.cli:
            group.addoption(spec.cli, default=None, dest=spec.dest, help=spec.help, **how)
        if spec.repeatable:
            parser.addini(spec.ini, spec.help, type="linelist", default=[])
        else:
            parser.addini(spec.ini, spec.help, type="string", default="")


@pytest.hookimpl
def pytest_configure(config: pytest.Config) -> None:
    """Register the markers and fixtures; when anything of ours is set, resolve and check it."""
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    config.pluginmanager.register(fixtures, "sglang-fixtures")
    if config.option.help or config.option.version:
        return
    # SIGTERM as Ctrl-C; an interrupted session reports what it measured and stops its servers.
    config.pluginmanager.register(SessionInterrupts(config), "sglang-interrupts")
    if not anything_set(config):
        if not hasattr(config, "workerinput"):
            config.pluginmanager.register(_FirstEntry(config), "sglang-first-entry")
        return
    config.stash[SET_KEY] = True
    settings = fixtures.settings_of(config)  # usage errors stop pytest here, before collection
    from pytest_sglang.config.groups import configure_groups
    from pytest_sglang.timeouts import BRIDGE_KEY, TimeoutBridge

    # Launches never count against a test's pytest-timeout (see pytest_sglang.timeouts).
    config.stash[BRIDGE_KEY] = TimeoutBridge()
    config.pluginmanager.register(config.stash[BRIDGE_KEY], "sglang-timeout-bridge")
    # Under -n N or --sglang-shard: launch groups are kept whole (config/groups.py).
    workers = configure_groups(config, settings, servers_named)
    if workers and not config.option.collectonly:
        _refuse_launch_under_xdist(settings, workers)
    if not hasattr(config, "workerinput"):  # the controller reports, saves and judges
        _, reporter = _start_reporters(config)
        from pytest_sglang.verdicts.baseline_options import baseline_options

        options = baseline_options(config)
        if options.active:
            from pytest_sglang.verdicts.regression import register_gate

            register_gate(config, options, reporter)


def _start_reporters(config: pytest.Config) -> tuple[EntryLedger, SGLangReporter]:
    """Register the entry ledger (first to see each report) and the reporter, on the controller."""
    from pytest_sglang.report.collector import SGLangReporter
    from pytest_sglang.report.junit import EntryLedger

    settings = fixtures.settings_of(config)

    def launches() -> list[dict[str, Any]]:
        pool = config.stash.get(fixtures.POOL_KEY, None)
        workers = config.stash.get(WORKERS_KEY, [])
        mine = [i.as_dict() for i in pool.launches] if pool is not None else []
        return mine + [record for worker in workers for record in worker["records"]]

    ledger = EntryLedger(settings.redact)
    config.pluginmanager.register(ledger, "sglang-entries")
    reporter = SGLangReporter(
        config,
        settings.report.value,
        settings.markdown.value,
        redact=settings.redact,
        launches=launches,
    )
    config.pluginmanager.register(reporter, "sglang-reporter")
    return ledger, reporter


class _FirstEntry:
    """In a session that set nothing of ours: starts the reporters at the first entry."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> Generator[None, None, None]:
        """Hand the first report with an ``sglang`` entry to the reporters it starts."""
        if all(name != "sglang" for name, _ in report.user_properties):
            return (yield)
        self.config.pluginmanager.unregister(self)
        ledger, reporter = _start_reporters(self.config)
        ledger.take(report)
        yield
        reporter.pytest_runtest_logreport(report)


_Phase = Literal["setup", "call", "teardown"]
_Outcome = Literal["passed", "failed"]
_PHASES: tuple[_Phase, ...] = ("setup", "call", "teardown")


class SessionInterrupts:
    """The session's handling of SIGINT and SIGTERM (see the module docstring)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        #: The handlers to restore at the end, by signal.
        self._previous: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}
        self._hurried = False
        #: What interrupted the session first, for the interrupted test's report.
        self._cause = "Ctrl-C (KeyboardInterrupt)"
        #: The phases of the running test that were reported.
        self._reported: set[str] = set()

    def _install(self, handler: Callable[[int, FrameType | None], None], *signums: int) -> None:
        # Install it; remember the handler each signal had first. Only the main thread may set
        # handlers (and it receives the signals).
        if threading.current_thread() is threading.main_thread():
            for signum in signums:
                self._previous.setdefault(signum, signal.signal(signum, handler))

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        """Handle the first SIGTERM as Ctrl-C."""
        self._cause = "SIGTERM (handled as Ctrl-C: KeyboardInterrupt)"
        handler = signal.getsignal(signal.SIGINT)
        if not callable(handler):  # SIG_IGN or SIG_DFL: SIGTERM still ends the session
            handler = signal.default_int_handler
        handler(signal.SIGINT, frame)  # Python's raises KeyboardInterrupt

    def _on_again(self, signum: int, frame: FrameType | None) -> None:
        """Hurry an ending session: kill what it launched now, raise nothing."""
        if not self._hurried:
            self._hurried = True
            name = signal.Signals(signum).name
            print(  # noqa: T201
                f"\nsglang: interrupted again ({name}): killing the servers this session "
                "launched now (SIGKILL, no grace period), then writing its outputs",
                file=sys.stderr,
            )
        pool = self.config.stash.get(fixtures.POOL_KEY, None)
        if pool is not None:
            pool.hurry()  # safe in a signal handler

    def _ending_now(self) -> None:
        """From here on, SIGINT and SIGTERM hurry the end instead of raising (idempotent)."""
        self._install(self._on_again, signal.SIGINT, signal.SIGTERM)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self) -> None:
        """Handle SIGTERM as Ctrl-C for the session."""
        self._install(self._on_sigterm, signal.SIGTERM)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        """Report the test an interrupt cut short, with what it had measured."""
        self._reported = set()
        try:
            return (yield)
        except KeyboardInterrupt:
            self._ending_now()
            try:
                self._report_interrupted(item)
            except Exception as exc:  # never in the way of the interrupt itself
                print(f"sglang: reporting the interrupted test: {exc}", file=sys.stderr)  # noqa: T201
            raise

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Note which phases of the running test were reported."""
        self._reported.add(report.when)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, exitstatus: int) -> None:
        """Stop what an interrupted session started before its outputs are written."""
        self._ending_now()
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            fixtures.stop_started(self.config)

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self) -> None:
        """Stop anything still running (internal errors, ``-x``), then give the signals back."""
        try:
            fixtures.stop_started(self.config)  # no server outlives pytest
        finally:  # the signals go back even if a stop failed
            for signum, previous in self._previous.items():
                if signal.getsignal(signum) in (self._on_sigterm, self._on_again):
                    signal.signal(signum, previous if previous is not None else signal.SIG_DFL)

    def _report_interrupted(self, item: pytest.Item) -> None:
        """Send the reports of the phase that was cut (and a teardown's, to close it)."""
        if "sglang_servers" not in getattr(item, "fixturenames", ()):
            return  # not one of ours: pytest's own handling stands
        when = next((phase for phase in _PHASES if phase not in self._reported), None)
        if when is None:
            return  # every phase was reported: the interrupt came after
        item.user_properties.extend(fixtures.unreported_properties(self.config))
        message = f"interrupted by {self._cause} during this test's {when}"
        if when != "teardown":
            message += (
                ": it has no verdict; the runs it finished are in the outputs (a cut "
                "measurement says in which run)"
            )
        _send(item, when, "failed", message)
        if when != "teardown":
            _send(item, "teardown", "passed", None)  # JUnit writes a test's properties with it


def _send(item: pytest.Item, when: _Phase, outcome: _Outcome, longrepr: str | None) -> None:
    """Send a report of one phase of ``item`` to the reporters, with its ``user_properties``."""
    report = pytest.TestReport(
        item.nodeid,
        item.location,
        dict.fromkeys(item.keywords, 1),
        outcome,
        longrepr,
        when,
        user_properties=item.user_properties,
    )
    item.ihook.pytest_runtest_logreport(report=report)


def _refuse_launch_under_xdist(settings: Settings, workers: int) -> None:
    """Stop at startup when launch mode cannot share the GPUs out between ``-n N`` workers."""
    launched = [name for name, target in settings.targets.items() if target.url is None]
    if not launched or settings.launches_hold_no_gpus:
        return  # nothing to launch, or emulators that hold no GPU: nothing to share out
    from pytest_sglang.errors import GpuUnavailable
    from pytest_sglang.gpu.hygiene import visible_gpus

    fix = (
        "run without -n, or attach running servers instead (--sglang-url NAME=URL for each "
        "profile; each launch group still runs on one worker)"
    )
    try:
        snapshot, probe = gpu_snapshot(settings)
    except GpuUnavailable as exc:
        raise pytest.UsageError(
            f"launch mode under pytest-xdist (-n {workers}) shares the host's GPUs out between "
            f"the workers, but GPU state cannot be read ({exc}); {fix}"
        ) from None
    gpus = visible_gpus(snapshot, os.environ)
    if len(gpus) < workers:
        raise pytest.UsageError(
            f"launch mode under pytest-xdist (-n {workers}) gives each worker an equal share "
            f"of the host's GPUs, but {probe} shows {len(gpus)}; use at most "
            f"-n {max(1, len(gpus))}, or {fix}"
        )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """Let verdicts called from the test record their evidence on it."""
    from pytest_sglang.report.entries import CURRENT_ITEM

    token = CURRENT_ITEM.set(item)
    try:
        return (yield)
    finally:
        CURRENT_ITEM.reset(token)


@pytest.hookimpl
def pytest_report_header(config: pytest.Config) -> list[str] | None:
    """Show the settings, when any is set (the API key redacted)."""
    if not config.stash.get(SET_KEY, False):
        return None
    from pytest_sglang.config.header import header_lines

    return header_lines(fixtures.settings_of(config))


@pytest.hookimpl
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run unmarked server tests once per configured server when several are configured."""
    if metafunc.config.stash.get(SET_KEY, False):
        parametrize_over_servers(metafunc, fixtures.settings_of(metafunc.config))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Validate markers, group tests by profile (one launch each), evaluate ``sglang_requires``."""
    validate_markers(items)
    items[:] = order_by_profile(items)
    marked = [item for item in items if item.get_closest_marker("sglang_requires")]
    # --collect-only must touch nothing: requirements are evaluated only for a real run.
    if marked and not config.option.collectonly:
        evaluate_requirements(marked, fixtures.settings_of(config))


@pytest.hookimpl
def pytest_collection_finish(session: pytest.Session) -> None:
    """Read the measurements the selected tests declare (``sglang_measure``), after every -k/-m."""
    if any(item.get_closest_marker("sglang_measure") for item in session.items):
        from pytest_sglang.measure.bench import PLANS_KEY, declared_measurements

        session.config.stash[PLANS_KEY] = declared_measurements(session.items)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip (or, under ``--sglang-require``, fail) tests whose ``sglang_requires`` is unmet."""
    unmet = item.stash.get(UNMET_KEY, None)
    if unmet is not None:
        fixtures.unavailable(fixtures.settings_of(item.config), unmet)


@pytest.hookimpl
def pytest_sessionfinish(session: pytest.Session) -> None:
    """In a pytest-xdist worker: send its launches to the controller (which reports)."""
    output = getattr(session.config, "workeroutput", None)
    pool = session.config.stash.get(fixtures.POOL_KEY, None)
    if output is None or pool is None:
        return
    worker = str(getattr(session.config, "workerinput", {}).get("workerid", "gw?"))
    output["sglang_launches"] = {
        "worker": worker,
        "records": [{**info.as_dict(), "worker": worker} for info in pool.launches],
        "lines": _summary_lines(pool),
    }


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """In the pytest-xdist controller: keep what a worker that went down launched."""
    sent = getattr(node, "workeroutput", {}).get("sglang_launches")
    if sent:
        node.config.stash.setdefault(WORKERS_KEY, []).append(sent)


@pytest.hookimpl
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Summarise the session's launches: how many, each one's timings and outcome."""
    config = terminalreporter.config
    pool = config.stash.get(fixtures.POOL_KEY, None)
    workers = sorted(
        (w for w in config.stash.get(WORKERS_KEY, []) if w["records"]), key=lambda w: w["worker"]
    )
    if workers:
        count = sum(len(worker["records"]) for worker in workers)
        where = f" in {len(workers)} pytest-xdist worker(s), each on its own share of the GPUs"
        lines = [
            (f"  [{w['worker']}]{line}", markup) for w in workers for line, markup in w["lines"]
        ]
    elif pool is not None and pool.launches:
        count, where, lines = len(pool.launches), "", _summary_lines(pool)
    else:
        return
    terminalreporter.section("sglang launches")
    terminalreporter.write_line(f"{count} server launch{'es' if count != 1 else ''}{where}:")
    for line, markup in lines:
        terminalreporter.write_line(line, **markup)


def _summary_lines(pool: ServerPool) -> list[tuple[str, dict[str, bool]]]:
    """Return the pool's part of the launch summary, redacted, each line with its colour."""
    lines = [(launch_line(i), {"red": i.outcome in ("failed", "died")}) for i in pool.launches]
    lines += [(advice, {"yellow": True}) for advice in relaunch_advice(pool.launches)]
    if pool.flight_skip_reason:
        lines.append((f"  GPU checks skipped: {pool.flight_skip_reason}", {}))
    lines += [(f"  problem: {problem}", {"red": True}) for problem in pool.problems]
    return [(pool.settings.redact(line), markup) for line, markup in lines]


def launch_line(info: LaunchInfo) -> str:
    """One launch in the summary: outcome, then what is known, never an empty cause."""
    from pytest_sglang.server.handle import KILLED_AT_ONCE

    details = [info.cause] if info.cause else []
    if info.seconds_to_ready:
        phases = ", ".join(f"{p} {t:.2f}s" for p, t in info.readiness.items())
        details.append(f"ready in {info.seconds_to_ready:.2f}s ({phases})")
    if info.gpus:
        details.append(f"on GPUs {', '.join(info.gpus)}")
    if info.stop is not None:
        details.append(f"stopped in {info.stop.seconds:.2f}s")
        kill = next((sent for sent in info.stop.signals if "SIGKILL" in sent), None)
        if kill is not None and info.outcome != "died":
            details.append(f"forced: {kill}, SIGTERM was not enough")
        if KILLED_AT_ONCE in info.stop.signals:
            details.append(KILLED_AT_ONCE)
    if info.release_seconds is not None:
        details.append(f"GPU memory released in {info.release_seconds:.2f}s")
    head = f"  {info.profile} [{info.launcher}] {info.outcome}"
    return f"{head}: {'; '.join(details)}" if details else head


def relaunch_advice(launches: list[LaunchInfo]) -> list[str]:
    """Name each launch of a profile after its first, who asked for it and how to avoid it."""
    lines = []
    for index, info in enumerate(launches):
        if all(earlier.profile != info.profile for earlier in launches[:index]):
            continue
        asked = f"asked again by {info.requested_by}" if info.requested_by else "asked again"
        why = (
            f"for {info.reason}"
            if info.reason
            else "after another profile replaced it; mark the tests of one server with "
            "@pytest.mark.sglang_profile (they run together), and declare what tests "
            "comparing servers measure with @pytest.mark.sglang_measure"
        )
        lines.append(f"  relaunched {info.profile!r}: {asked} {why}")
    return lines
