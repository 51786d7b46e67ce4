"""The ``sglang_*`` fixtures: thin glue over settings, the server pool and the GPU probe.

Heavy modules (httpx, jsonschema, psutil, pynvml) are imported inside fixture bodies only,
so that loading the plugin stays cheap for every pytest run in the environment.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, NoReturn

import pytest

from pytest_sglang.config.settings import SETTINGS_KEY, Settings
from pytest_sglang.markers import expectations_of, profile_of
from pytest_sglang.measure.plans import PLANS_KEY
from pytest_sglang.timeouts import BRIDGE_KEY

if TYPE_CHECKING:
    import httpx

    from pytest_sglang.errors import SGLangError
    from pytest_sglang.gpu.probes import GpuState
    from pytest_sglang.measure.bench import Bench
    from pytest_sglang.measure.results import BenchResult
    from pytest_sglang.report.entries import (
        GpusEntry,
        MeasurementEntry,
        ServerEntry,
        ServerFailureEntry,
    )
    from pytest_sglang.server.handle import SGLangServer
    from pytest_sglang.server.pool import ServerPool

__all__ = [
    "POOL_KEY",
    "hurry_started",
    "measurement_properties",
    "sglang_bench",
    "sglang_client",
    "sglang_gpu",
    "sglang_server",
    "sglang_servers",
    "sglang_settings",
    "sglang_target",
    "stop_started",
    "unreported_properties",
]

#: The session's pool, also reachable from hooks (terminal summary, unconfigure).
POOL_KEY = pytest.StashKey["ServerPool"]()
#: The session's bench (one cache of measurements for every test).
BENCH_KEY = pytest.StashKey["Bench"]()

_HOW_TO_ATTACH = (
    "attach one with --sglang-url=URL (or NAME=URL for @pytest.mark.sglang_profile(NAME)), "
    "or define server profiles (--sglang-profiles PATH or [tool.pytest-sglang.profiles.NAME] "
    "in pyproject.toml) to launch one"
)


def _unavailable(settings: Settings, message: str) -> NoReturn:
    # Skip by default so that a GPU-less run of a suite is not a wall of errors; with
    # --sglang-require a missing server is a failure, as CI on GPU runners wants.
    message = settings.redact(message)
    if settings.require.value:
        pytest.fail(
            f"{message} (--sglang-require is set, from {settings.require.source})", pytrace=False
        )
    pytest.skip(message)


def _fail(settings: Settings, message: str) -> NoReturn:
    # Every failure message passes the redaction rule: it quotes server logs and commands.
    pytest.fail(settings.redact(message), pytrace=False)


def failure_entry(name: str, error: SGLangError, settings: Settings) -> ServerFailureEntry:
    """Describe a server a test could not have (failed gate or launch, died), for the report."""
    return {
        "record": "server_failure",
        "server": name,
        "error": type(error).__name__,
        "phase": getattr(error, "phase", None),
        "exit_code": getattr(error, "exit_code", None),
        "message": settings.redact(str(error)),
    }


@pytest.fixture(scope="session")
def sglang_settings(pytestconfig: pytest.Config) -> Settings:
    """The plugin's effective settings (servers, profiles, timeouts, expectations).

    Each value carries the source it came from (command line, environment, ini or default).
    """
    return pytestconfig.stash[SETTINGS_KEY]


@pytest.fixture(scope="session")
def sglang_servers(
    pytestconfig: pytest.Config,
    sglang_settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServerPool]:
    """The session's pool of SGLang servers, for session-scoped fixtures of your own.

    ``sglang_servers.get(NAME)`` returns the ready server called NAME: an attached one after
    its readiness gate, or a profile's server launched on first use (one launched server at
    a time; the session's end stops it and checks its GPU memory is released).
    """
    from pytest_sglang.config.xdist_groups import shared_folder
    from pytest_sglang.report.progress import progress_writer
    from pytest_sglang.server.pool import ServerPool

    bridge = pytestconfig.stash.get(BRIDGE_KEY, None)
    basetemp = tmp_path_factory.getbasetemp()
    pool = ServerPool(
        sglang_settings,
        log_dir=basetemp / "sglang-logs",
        progress=progress_writer(pytestconfig),
        xdist_worker=xdist_worker(pytestconfig),
        outside_test_timeout=bridge.suspended if bridge is not None else contextlib.nullcontext,
        lock_dir=(shared_folder(pytestconfig) or basetemp) / "sglang-locks",
    )
    pytestconfig.stash[POOL_KEY] = pool
    if len(pytestconfig.stash.get(PLANS_KEY, ())):
        # A launched server takes every declared measurement while it is up, whichever
        # test launched it (even one that measures nothing): no relaunch to take them.
        pool.on_launched = lambda server: session_bench(pytestconfig, pool).take_declared(server)
    yield pool
    # Stopping a server and waiting for its GPU memory is the session's time, not the last
    # test's pytest-timeout.
    with bridge.suspended() if bridge is not None else contextlib.nullcontext():
        pool.close()


def xdist_worker(config: pytest.Config) -> tuple[int, int] | None:
    """Return (index, count) when this session is a pytest-xdist worker, else None."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return None
    index = int(str(workerinput["workerid"]).removeprefix("gw"))
    return index, int(workerinput["workercount"])


@pytest.fixture
def sglang_target() -> str | None:
    """The server name an unmarked test runs against (None: the default server).

    With several servers and none called ``default``, an unmarked test that needs a server
    runs once per server, this holding the run's name. Overriding it does not stop that:
    mark the tests, or call one server ``default``.
    """
    return None


@pytest.fixture
def sglang_server(
    request: pytest.FixtureRequest,
    sglang_servers: ServerPool,
    sglang_settings: Settings,
    sglang_target: str | None,
) -> SGLangServer:
    """The ready SGLang server this test runs against, past the readiness gate.

    The server named by the closest ``@pytest.mark.sglang_profile(NAME)``, else the only one
    configured (or the one named ``default``). Skipped when no server is configured, a
    failure under ``--sglang-require``.
    """
    # What the test will use (sglang_bench's modules, CONFIG_KEYS for server_entry) is
    # imported while the server starts, not after it is ready.
    import pytest_sglang.measure.bench  # noqa: F401
    from pytest_sglang.errors import ServerUnavailable, SGLangError
    from pytest_sglang.server.identity import (
        check_model_expectations,
        check_server_info_expectations,
    )

    if not sglang_settings.servers and not sglang_settings.profiles:
        _unavailable(sglang_settings, f"no SGLang server configured: {_HOW_TO_ATTACH}")
    # Fail or skip outside the except blocks so the report shows our message only, not
    # "during handling of the above exception".
    failure: str | None = None
    unavailable = False
    name = ""
    try:
        name = profile_of(request.node) or sglang_target or sglang_servers.default_name()
        server = sglang_servers.get(name, during=request.node.nodeid)
    except ServerUnavailable as exc:
        failure, unavailable = str(exc), True
    except SGLangError as exc:
        failure = str(exc)
        request.node.user_properties.append(("sglang", failure_entry(name, exc, sglang_settings)))
    if failure is not None:
        if unavailable:
            _unavailable(sglang_settings, failure)
        _fail(sglang_settings, failure)
    expectations = expectations_of(request.node)
    problems = check_model_expectations(server.models, expectations)
    problems += check_server_info_expectations(server.server_info, expectations, "/server_info")
    if problems:
        _fail(
            sglang_settings,
            f"SGLang server {server.name!r} at {server.url} does not match this test's "
            "expectations:\n  " + "\n  ".join(problems),
        )
    request.node.user_properties.append(("sglang", server_entry(server, sglang_settings)))
    gpus = sglang_servers.gpu_names()
    if gpus:
        gpus_entry: GpusEntry = {"record": "gpus", "names": gpus}
        request.node.user_properties.append(("sglang", gpus_entry))
    return server


def server_entry(server: SGLangServer, settings: Settings | None = None) -> ServerEntry:
    """Describe a server for the report: identity, readiness, launch, configuration.

    Redacted: the entry also travels in JUnit XML, as a test property.
    """
    from pytest_sglang.measure.results import CONFIG_KEYS

    entry: ServerEntry = {
        "record": "server",
        "name": server.name,
        "url": server.url,
        "version": server.version,
        "model": server.model.id,
        "readiness": server.readiness.as_dict(),
        "launch": server.launch.as_dict() if server.launch is not None else None,
        "config": {k: server.server_info[k] for k in CONFIG_KEYS if k in server.server_info},
    }
    if server.not_applicable:
        entry["kind"] = server.kind
        entry["not_applicable"] = server.not_applicable
    if settings is None:
        return entry
    redacted: ServerEntry = settings.redact.json(entry)
    return redacted


@pytest.fixture(scope="session")
def _sglang_bench_session(pytestconfig: pytest.Config, sglang_servers: ServerPool) -> Bench:
    """The session's bench: its cache is shared by every test's ``sglang_bench``."""
    return session_bench(pytestconfig, sglang_servers)


def session_bench(config: pytest.Config, pool: ServerPool) -> Bench:
    """Return the session's bench, made on first use (by a test, or by a launch)."""
    from pytest_sglang.measure.bench import Bench

    existing = config.stash.get(BENCH_KEY, None)
    if existing is not None:
        return existing
    settings = pool.settings
    limits = {
        "request_timeout": settings.request_timeout.value,
        "stall_timeout": settings.stall_timeout.value,
        "first_token_timeout": settings.first_token_timeout.value,
        # 0 on the command line: never stop a run early for unanswered requests.
        "max_consecutive_failures": settings.max_consecutive_failures.value or None,
        # Where the load runs: taken out by the bench (docs/scaling.md).
        "load_workers": settings.load_workers.value,
        "ray_address": settings.ray_address.value,
    }
    from pytest_sglang.report.progress import progress_writer, run_line

    bench = Bench(
        pool,
        progress=progress_writer(config),
        run_line=run_line(config),
        generator_options=limits,
        plans=config.stash.get(PLANS_KEY, None),
    )
    config.stash[BENCH_KEY] = bench
    return bench


@pytest.fixture
def sglang_bench(request: pytest.FixtureRequest, _sglang_bench_session: Bench) -> Bench:
    """Measure a workload on a server: ``sglang_bench(SERVER, workload, concurrency, repeats)``.

    SERVER is a server name or an ``SGLangServer``. Returns a ``BenchResult`` (``repeats``
    runs, default 5, warm-up excluded) or, for a list of concurrencies, a ``Sweep``; cached
    for the session, so tests share measurements. ``sglang_bench.pair(A, B, workload,
    concurrency)`` compares two servers, interleaved when both can run at once.
    """
    settings = _sglang_bench_session.pool.settings

    def record(result: BenchResult, server: SGLangServer | None) -> None:
        request.node.user_properties.extend(measurement_properties(result, server, settings))

    def server_failed(name: str, error: SGLangError) -> None:
        request.node.user_properties.append(("sglang", failure_entry(name, error, settings)))

    if not settings.servers and not settings.profiles:
        _unavailable(settings, f"no SGLang server configured: {_HOW_TO_ATTACH}")
    return _sglang_bench_session.with_recorder(
        record,
        unavailable=lambda message: _unavailable(settings, message),
        failure=lambda message: _fail(settings, message),
        server_failed=server_failed,
        during=request.node.nodeid,
    )


def measurement_properties(
    result: BenchResult, server: SGLangServer | None, settings: Settings
) -> list[tuple[str, object]]:
    """Return the ``user_properties`` that record ``result`` (and its server) for the report.

    Redacted, as every entry: they also travel in JUnit XML.
    """
    entry: MeasurementEntry = settings.redact.json({"record": "measurement", **result.as_dict()})
    properties: list[tuple[str, object]] = [("sglang", entry)]
    if server is not None:
        properties.append(("sglang", server_entry(server, settings)))
    return properties


@pytest.fixture
def sglang_client(sglang_server: SGLangServer) -> Iterator[httpx.Client]:
    """An httpx client bound to ``sglang_server`` (base URL, API key, timeouts).

    Relative paths work: ``sglang_client.get("/v1/models")``. Closed at teardown.
    """
    with sglang_server.client() as client:
        yield client


@pytest.fixture(scope="session")
def sglang_gpu(sglang_servers: ServerPool, sglang_settings: Settings) -> GpuState:
    """GPU state through NVML (or nvidia-smi over ssh with sglang_gpu_host, or a fake).

    ``sglang_gpu.snapshot()`` returns every GPU (index, UUID, name, memory total/used/free)
    and compute process (pid, memory, name); ``before.diff(after)`` what changed. Skipped
    where GPU state cannot be read (no nvidia-ml-py, no driver), unless --sglang-require.
    """
    from pytest_sglang.errors import GpuUnavailable
    from pytest_sglang.gpu.probes import GpuState

    failure: str | None = None
    try:
        probe = sglang_servers.gpu_probe()
    except GpuUnavailable as exc:
        failure = str(exc)
    if failure is not None:
        _fail(sglang_settings, failure)
    if probe is None:
        pytest.skip(f"GPU state unavailable: {sglang_servers.gpu_skip_reason}")
    return GpuState(probe)


def stop_started(config: pytest.Config) -> None:
    """Stop what the session started and still runs: Ray load workers, the launched server.

    Idempotent; problems are printed to standard error (the terminal reporter may be gone),
    never raised: it runs at the end of an interrupted session, and at exit.
    """
    bench = config.stash.get(BENCH_KEY, None)
    if bench is not None:  # the Ray load-worker actors it kept, if any
        try:
            bench.close()
        except Exception as exc:
            message = bench.pool.settings.redact(f"sglang: stopping the Ray load workers: {exc}")
            print(message, file=sys.stderr)  # noqa: T201
    pool = config.stash.get(POOL_KEY, None)
    if pool is not None:
        try:
            pool.close()
        except Exception as exc:  # at the end, say it: nothing else will
            print(pool.settings.redact(f"sglang: teardown: {exc}"), file=sys.stderr)  # noqa: T201


def hurry_started(config: pytest.Config) -> None:
    """Kill the session's launched server at once, no grace period (safe in a signal handler)."""
    pool = config.stash.get(POOL_KEY, None)
    if pool is not None:
        pool.hurry()


def unreported_properties(config: pytest.Config) -> list[tuple[str, object]]:
    """Return, once, ``user_properties`` for the measurements no test has recorded.

    Those taken for tests that have not run (declared ones) and those cut while being
    taken so (``Bench.take_unreported``): an interrupted test carries them to the reports.
    """
    bench = config.stash.get(BENCH_KEY, None)
    if bench is None:
        return []
    settings = bench.pool.settings
    return [
        prop
        for result, server in bench.take_unreported()
        for prop in measurement_properties(result, server, settings)
    ]
