"""pytest-sglang's pytest11 entry point: hooks and options only.

Work (network, processes) happens in fixtures, never here: ``pytest --help`` and
``pytest --collect-only`` run ``pytest_configure`` too, and must start nothing.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from pytest_sglang.config.header import header_lines
from pytest_sglang.config.options import OPTIONS
from pytest_sglang.config.settings import SETTINGS_KEY, Settings, resolve_settings
from pytest_sglang.fixtures import (
    POOL_KEY,
    _sglang_bench_session,
    hurry_started,
    sglang_bench,
    sglang_client,
    sglang_gpu,
    sglang_server,
    sglang_servers,
    sglang_settings,
    sglang_target,
    stop_started,
    unreported_properties,
)
from pytest_sglang.interrupts import SessionInterrupts
from pytest_sglang.markers import (
    MARKERS,
    UNMET_KEY,
    evaluate_requirements,
    order_by_profile,
    parametrize_over_servers,
    profile_of,
    validate_markers,
)
from pytest_sglang.measure.plans import MEASURE_MARKER, PLANS_KEY, declared_measurements
from pytest_sglang.timeouts import BRIDGE_KEY, TimeoutBridge

if TYPE_CHECKING:
    from pytest_sglang.server.handle import LaunchInfo

__all__ = [
    "_sglang_bench_session",
    "sglang_bench",
    "sglang_client",
    "sglang_gpu",
    "sglang_server",
    "sglang_servers",
    "sglang_settings",
    "sglang_target",
]


@pytest.hookimpl
def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the ``sglang`` options and every setting's ini key (``config/options.py``)."""
    group = parser.getgroup("sglang", "SGLang server testing (docs/guide.md#options)")
    for spec in OPTIONS:
        if spec.cli is None:
            pass  # set once per project: an ini key and an environment variable only
        elif spec.flag:
            group.addoption(
                spec.cli, action="store_true", default=None, dest=spec.dest, help=spec.help
            )
        else:
            group.addoption(
                spec.cli,
                action="append" if spec.repeatable else "store",
                default=None,
                dest=spec.dest,
                metavar=spec.metavar,
                help=spec.help,
                **({"nargs": "?", "const": spec.const} if spec.const is not None else {}),
            )
        if spec.repeatable:
            parser.addini(spec.ini, spec.help, type="linelist", default=[])
        else:
            parser.addini(spec.ini, spec.help, type="string", default="")


@pytest.hookimpl
def pytest_configure(config: pytest.Config) -> None:
    """Register the markers and resolve the settings (validation only, no network)."""
    for line in (*MARKERS, MEASURE_MARKER):
        config.addinivalue_line("markers", line)
    if config.option.help or config.option.version:
        return
    settings = resolve_settings(config)
    config.stash[SETTINGS_KEY] = settings
    # Launches never count against a test's pytest-timeout (see pytest_sglang.timeouts).
    bridge = TimeoutBridge()
    config.stash[BRIDGE_KEY] = bridge
    config.pluginmanager.register(bridge, "sglang-timeout-bridge")
    # SIGTERM as Ctrl-C; an interrupted session reports what it measured and stops its servers.
    interrupts = SessionInterrupts(
        stop=lambda: stop_started(config),
        hurry=lambda: hurry_started(config),
        unreported=lambda: unreported_properties(config),
    )
    config.pluginmanager.register(interrupts, "sglang-interrupts")
    _refuse_launch_under_xdist(config, settings)
    # Under -n N: the tests of one launch group run on one worker (config/xdist_groups.py).
    from pytest_sglang.config.xdist_groups import configure_xdist

    configure_xdist(config, settings, servers_named)
    if settings.shard.value is not None:
        from pytest_sglang.config.shards import ShardSelector

        selector = ShardSelector(settings.shard.value, servers_named)
        config.pluginmanager.register(selector, "sglang-shard")
    # Only the controller reports: xdist workers send their results with the test reports.
    if not hasattr(config, "workerinput"):
        from pytest_sglang.report.collector import SGLangReporter
        from pytest_sglang.report.junit import EntryLedger

        # First: takes each report's entries out, for the reporters; JUnit gets concise ones.
        config.pluginmanager.register(EntryLedger(settings.redact), "sglang-entries")

        def launches() -> list[dict[str, Any]]:
            pool = config.stash.get(POOL_KEY, None)
            mine = pool.launch_records() if pool is not None else []
            return mine + [
                record for worker in config.stash.get(WORKERS_KEY, []) for record in worker.records
            ]

        config.pluginmanager.register(
            SGLangReporter(
                config,
                settings.report.value,
                settings.markdown.value,
                redact=settings.redact,
                launches=launches,
            ),
            "sglang-reporter",
        )
    # Stored baselines (--sglang-save, --sglang-compare...): the controller saves and judges.
    if not hasattr(config, "workerinput"):
        from pytest_sglang.verdicts.baseline_options import baseline_options

        options = baseline_options(config)
        if options.active:
            from pytest_sglang.verdicts.gate import register_gate

            register_gate(config, options)


def _refuse_launch_under_xdist(config: pytest.Config, settings: Settings) -> None:
    """One clear startup error when launch mode cannot share the GPUs out under ``-n N``.

    Each worker launches on its own share of the GPUs (``ServerPool``): checked once in the
    controller, before any worker starts, instead of every test failing alike.
    """
    if hasattr(config, "workerinput") or config.option.collectonly:
        return
    # xdist's own test for distribution (its pytest_cmdline_main ran before configure).
    workers = len(getattr(config.option, "tx", None) or [])
    if getattr(config.option, "dist", "no") in (None, "no") or not workers:
        return
    attached = {server.name for server in settings.servers}
    launched = [name for name in settings.profiles if name not in attached]
    if not launched or (settings.launcher.value == "emulator" and settings.gpu_fake.value is None):
        return  # nothing to launch, or emulators that hold no GPU: nothing to share out
    from pytest_sglang.errors import GpuUnavailable
    from pytest_sglang.gpu.hygiene import visible_gpus
    from pytest_sglang.gpu.probes import make_probe

    fix = (
        "run without -n, or attach running servers instead (--sglang-url NAME=URL for each "
        "profile; each launch group still runs on one worker)"
    )
    try:
        probe = make_probe(host=settings.gpu_host.value, fake_dir=settings.gpu_fake.value)
        try:
            gpus = visible_gpus(probe.snapshot(), os.environ)
        finally:
            probe.close()
    except GpuUnavailable as exc:
        raise pytest.UsageError(
            f"launch mode under pytest-xdist (-n {workers}) shares the host's GPUs out between "
            f"the workers, but GPU state cannot be read ({exc}); {fix}"
        ) from None
    if len(gpus) < workers:
        raise pytest.UsageError(
            f"launch mode under pytest-xdist (-n {workers}) gives each worker an equal share "
            f"of the host's GPUs, but {probe.describe()} shows {len(gpus)}; use at most "
            f"-n {max(1, len(gpus))}, or {fix}"
        )


def servers_named(item: pytest.Item) -> frozenset[str]:
    """Return the servers pytest can see ``item`` use: its profile and declared servers."""
    names = {str(arg) for marker in item.iter_markers("sglang_measure") for arg in marker.args}
    profile = profile_of(item)
    if profile is not None:
        names.add(profile)
    return frozenset(names)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """Let verdicts called from the test record their evidence on it."""
    from pytest_sglang.report.context import CURRENT_ITEM

    token = CURRENT_ITEM.set(item)
    try:
        return (yield)
    finally:
        CURRENT_ITEM.reset(token)


@pytest.hookimpl
def pytest_report_header(config: pytest.Config) -> list[str] | None:
    """Show the effective settings, with the API key redacted."""
    settings = config.stash.get(SETTINGS_KEY, None)
    return header_lines(settings) if settings is not None else None


@pytest.hookimpl
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run unmarked server tests once per configured server when several are configured."""
    settings = metafunc.config.stash.get(SETTINGS_KEY, None)
    if settings is not None:
        parametrize_over_servers(metafunc, settings)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Validate markers, group tests by profile (one launch each), evaluate ``sglang_requires``."""
    validate_markers(items)
    items[:] = order_by_profile(items)
    settings = config.stash.get(SETTINGS_KEY, None)
    # --collect-only must touch nothing: requirements are evaluated only for a real run.
    if settings is not None and not config.option.collectonly:
        evaluate_requirements(items, settings)


@pytest.hookimpl
def pytest_collection_finish(session: pytest.Session) -> None:
    """Read the measurements the tests that will run declare (``sglang_measure``).

    After every selection (``-k``, ``-m``, ``--sglang-shard``, other plugins'
    deselection), whatever the order the collection hooks ran in.
    """
    session.config.stash[PLANS_KEY] = declared_measurements(session.items)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip (or, under ``--sglang-require``, fail) tests whose ``sglang_requires`` is unmet."""
    unmet = item.stash.get(UNMET_KEY, None)
    if unmet is None:
        return
    settings = item.config.stash[SETTINGS_KEY]
    if settings.require.value:
        pytest.fail(f"{unmet} (--sglang-require is set)", pytrace=False)
    pytest.skip(unmet)


@dataclass(frozen=True)
class WorkerLaunches:
    """What a pytest-xdist worker launched: report records and summary lines."""

    worker: str
    records: list[dict[str, Any]]
    lines: list[str]


#: The launches of the session's pytest-xdist workers, as each worker went down.
WORKERS_KEY = pytest.StashKey[list[WorkerLaunches]]()


@pytest.hookimpl
def pytest_sessionfinish(session: pytest.Session) -> None:
    """In a pytest-xdist worker: send its launches to the controller (which reports)."""
    config = session.config
    output = getattr(config, "workeroutput", None)
    pool = config.stash.get(POOL_KEY, None)
    if output is None or pool is None:
        return
    worker = str(getattr(config, "workerinput", {}).get("workerid", "gw?"))
    redact = pool.settings.redact
    output["sglang_launches"] = {
        "worker": worker,
        "records": [{**record, "worker": worker} for record in pool.launch_records()],
        "lines": [redact(launch_line(info)) for info in pool.launches]
        + [redact(advice) for advice in relaunch_advice(pool.launches)],
    }


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """In the pytest-xdist controller: keep what a worker that went down launched."""
    sent = getattr(node, "workeroutput", {}).get("sglang_launches")
    if sent:
        node.config.stash.setdefault(WORKERS_KEY, []).append(
            WorkerLaunches(str(sent["worker"]), list(sent["records"]), list(sent["lines"]))
        )


@pytest.hookimpl
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Summarise the session's launches: how many, each one's timings and outcome."""
    workers = [w for w in terminalreporter.config.stash.get(WORKERS_KEY, []) if w.records]
    if workers:
        terminalreporter.section("sglang launches")
        count = sum(len(worker.records) for worker in workers)
        terminalreporter.write_line(
            f"{count} server launch{'es' if count != 1 else ''} in {len(workers)} "
            "pytest-xdist worker(s), each on its own share of the GPUs:"
        )
        for worker in sorted(workers, key=lambda w: w.worker):
            for line in worker.lines:
                terminalreporter.write_line(f"  [{worker.worker}]{line}")
    pool = terminalreporter.config.stash.get(POOL_KEY, None)
    if pool is None or not pool.launches:
        return
    terminalreporter.section("sglang launches")
    count = len(pool.launches)
    terminalreporter.write_line(f"{count} server launch{'es' if count != 1 else ''}:")
    redact = pool.settings.redact
    for info in pool.launches:
        terminalreporter.write_line(
            redact(launch_line(info)), red=info.outcome in ("failed", "died")
        )
    for advice in relaunch_advice(pool.launches):
        terminalreporter.write_line(redact(advice), yellow=True)
    if pool.flight_skip_reason:
        terminalreporter.write_line(f"  GPU checks skipped: {pool.flight_skip_reason}")
    for problem in pool.problems:
        terminalreporter.write_line(redact(f"  problem: {problem}"), red=True)


def launch_line(info: LaunchInfo) -> str:
    """One launch in the summary: outcome, then what is known, never an empty cause."""
    from pytest_sglang.server.handle import KILLED_AT_ONCE

    details: list[str] = []
    if info.cause:
        details.append(info.cause)
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
    seen: set[str] = set()
    lines: list[str] = []
    for info in launches:
        if info.profile not in seen:
            seen.add(info.profile)
            continue
        asked = f"asked again by {info.requested_by}" if info.requested_by else "asked again"
        if info.reason:
            lines.append(f"  relaunched {info.profile!r}: {asked} for {info.reason}")
        else:
            lines.append(
                f"  relaunched {info.profile!r}: {asked} after another profile replaced it; "
                "mark the tests of one server with @pytest.mark.sglang_profile (they run "
                "together), and declare what tests comparing servers measure with "
                "@pytest.mark.sglang_measure"
            )
    return lines


@pytest.hookimpl
def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop anything still running (internal errors, ``-x``): no server outlives pytest."""
    stop_started(config)
