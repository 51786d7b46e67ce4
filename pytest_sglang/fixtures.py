"""The ``sglang_*`` fixtures: glue over the settings, the server pool and the GPU probe.

Heavy modules are imported inside fixture bodies only: loading the plugin stays cheap.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, NoReturn

import pytest

from pytest_sglang.markers import expectations_of, profile_of

if TYPE_CHECKING:
    import httpx

    from pytest_sglang.config.settings import Settings
    from pytest_sglang.errors import SGLangError
    from pytest_sglang.gpu.probes import GpuState
    from pytest_sglang.measure.bench import Bench
    from pytest_sglang.measure.results import BenchResult
    from pytest_sglang.report.entries import GpusEntry, ServerEntry, ServerFailureEntry
    from pytest_sglang.server.handle import SGLangServer
    from pytest_sglang.server.pool import ServerPool

#: The session's pool, also reachable from hooks (terminal summary, unconfigure).
POOL_KEY = pytest.StashKey["ServerPool"]()
#: The session's bench (one cache of measurements for every test).
BENCH_KEY = pytest.StashKey["Bench"]()


def settings_of(config: pytest.Config) -> Settings:
    """Return the session's settings, resolved on first use where configure did not need them."""
    from pytest_sglang.config.settings import SETTINGS_KEY, resolve_settings

    if SETTINGS_KEY not in config.stash:
        config.stash[SETTINGS_KEY] = resolve_settings(config)
    return config.stash[SETTINGS_KEY]


def _need_a_server(settings: Settings) -> None:
    if not settings.servers and not settings.profiles:
        unavailable(
            settings,
            "no SGLang server configured: attach one with --sglang-url=URL (or NAME=URL for "
            "@pytest.mark.sglang_profile(NAME)), or define server profiles (--sglang-profiles "
            "PATH or [tool.pytest-sglang.profiles.NAME] in pyproject.toml) to launch one",
        )


def unavailable(settings: Settings, message: str) -> NoReturn:
    """Skip the test for ``message`` (what it needs is missing), or fail under --sglang-require.

    A skip, so that a GPU-less run is not a wall of errors.
    """
    message = settings.redact(message)
    if settings.require.value:
        _fail(settings, f"{message} (--sglang-require is set, from {settings.require.source})")
    raise pytest.skip.Exception(message) from None


def _fail(settings: Settings, message: str) -> NoReturn:
    # Redacted: failure messages quote server logs and commands. From None: raised while
    # handling our error, the report shows our message, not the chained exception.
    raise pytest.fail.Exception(settings.redact(message), pytrace=False) from None


def _failure_entry(name: str, error: SGLangError, settings: Settings) -> ServerFailureEntry:
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
    """The plugin's effective settings, each value with the source it came from."""
    return settings_of(pytestconfig)


@pytest.fixture(scope="session")
def sglang_servers(
    pytestconfig: pytest.Config,
    sglang_settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServerPool]:
    """The session's pool of SGLang servers, for session-scoped fixtures of your own.

    ``sglang_servers.get(NAME)`` returns the ready server NAME: an attached one past its
    readiness gate, or a profile's server launched on first use (one at a time).
    """
    from pytest_sglang.config.groups import shared_folder
    from pytest_sglang.measure.bench import PLANS_KEY
    from pytest_sglang.report.progress import progress_writer
    from pytest_sglang.server.pool import ServerPool
    from pytest_sglang.timeouts import BRIDGE_KEY, TimeoutBridge

    # Without the session's bridge (nothing of ours set), one that knows no timer: no-op.
    outside_test_timeout = pytestconfig.stash.get(BRIDGE_KEY, TimeoutBridge()).suspended
    workerinput = getattr(pytestconfig, "workerinput", None)
    basetemp = tmp_path_factory.getbasetemp()
    pool = ServerPool(
        sglang_settings,
        log_dir=basetemp / "sglang-logs",
        progress=progress_writer(pytestconfig),
        xdist_worker=(
            (int(str(workerinput["workerid"]).removeprefix("gw")), int(workerinput["workercount"]))
            if workerinput is not None
            else None
        ),
        outside_test_timeout=outside_test_timeout,
        lock_dir=(shared_folder(pytestconfig) or basetemp) / "sglang-locks",
    )
    pytestconfig.stash[POOL_KEY] = pool
    if len(pytestconfig.stash.get(PLANS_KEY, ())):
        # A launched server takes every declared measurement while it is up, whichever
        # test launched it: no relaunch to take them.
        pool.on_launched = lambda server: session_bench(pytestconfig, pool).take_declared(server)
    yield pool
    # Stopping a server is the session's time, not the last test's pytest-timeout.
    with outside_test_timeout():
        pool.close()


@pytest.fixture
def sglang_target() -> str | None:
    """The server name an unmarked test runs against (None: the default server).

    With several servers and none called ``default``, an unmarked test that needs a server
    runs once per server, this holding the run's name.
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

    The one named by the closest ``@pytest.mark.sglang_profile(NAME)``, else the only one
    configured (or ``default``). Skipped when none is configured, unless ``--sglang-require``.
    """
    # What the test will use is imported while the server starts, not after it is ready.
    import pytest_sglang.measure.bench  # noqa: F401
    from pytest_sglang.errors import ServerUnavailable, SGLangError
    from pytest_sglang.server.readiness import (
        check_model_expectations,
        check_server_info_expectations,
    )

    _need_a_server(sglang_settings)
    name = ""
    try:
        name = profile_of(request.node) or sglang_target or sglang_servers.default_name()
        server = sglang_servers.get(name, during=request.node.nodeid)
    except ServerUnavailable as exc:
        unavailable(sglang_settings, str(exc))
    except SGLangError as exc:
        request.node.user_properties.append(("sglang", _failure_entry(name, exc, sglang_settings)))
        _fail(sglang_settings, str(exc))
    expectations = expectations_of(request.node)
    problems = check_model_expectations(server.models, expectations)
    problems += check_server_info_expectations(
        server.server_info, expectations, "/server_info", models=server.models
    )
    if problems:
        _fail(
            sglang_settings,
            f"SGLang server {server.name!r} at {server.url} does not match this test's "
            "expectations:\n  " + "\n  ".join(problems),
        )
    request.node.user_properties.append(("sglang", _server_entry(server, sglang_settings)))
    gpus = sglang_servers.gpu_names()
    if gpus:
        gpus_entry: GpusEntry = {"record": "gpus", "names": gpus}
        request.node.user_properties.append(("sglang", gpus_entry))
    return server


def _server_entry(server: SGLangServer, settings: Settings) -> ServerEntry:
    """Describe a server for the report (redacted: it also travels in JUnit XML)."""
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
    redacted: ServerEntry = settings.redact.json(entry)
    return redacted


def session_bench(config: pytest.Config, pool: ServerPool) -> Bench:
    """Return the session's bench, made on first use (by a test, or by a launch)."""
    from pytest_sglang.measure.bench import PLANS_KEY, Bench
    from pytest_sglang.report.progress import run_line

    if BENCH_KEY not in config.stash:
        plans = config.stash.get(PLANS_KEY, None)
        config.stash[BENCH_KEY] = Bench(pool, run_line=run_line(config), plans=plans)
    return config.stash[BENCH_KEY]


@pytest.fixture
def sglang_bench(request: pytest.FixtureRequest, sglang_servers: ServerPool) -> Bench:
    """Measure a workload on a server: ``sglang_bench(SERVER, workload, concurrency, repeats)``.

    Returns a ``BenchResult`` (``repeats`` runs, default 5, warm-up excluded) or, for a list
    of concurrencies, a ``Sweep``; cached for the session, so tests share measurements.
    ``sglang_bench.pair(A, B, workload, concurrency)`` compares two servers, interleaved when
    both can run at once.
    """
    settings = sglang_servers.settings
    _need_a_server(settings)
    node = request.node
    return session_bench(request.config, sglang_servers).with_recorder(
        lambda result, server: node.user_properties.extend(
            _measurement_properties(result, server, settings)
        ),
        unavailable=lambda message: unavailable(settings, message),
        failure=lambda message: _fail(settings, message),
        server_failed=lambda name, error: node.user_properties.append(
            ("sglang", _failure_entry(name, error, settings))
        ),
        during=node.nodeid,
    )


def _measurement_properties(
    result: BenchResult, server: SGLangServer | None, settings: Settings
) -> list[tuple[str, object]]:
    """Return the ``user_properties`` that record ``result`` (and its server), redacted."""
    entry = settings.redact.json({"record": "measurement", **result.as_dict()})
    properties: list[tuple[str, object]] = [("sglang", entry)]
    if server is not None:
        properties.append(("sglang", _server_entry(server, settings)))
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

    ``sglang_gpu.snapshot()`` returns every GPU and compute process; ``before.diff(after)``
    what changed. Skipped where GPU state cannot be read, unless ``--sglang-require``.
    """
    from pytest_sglang.errors import GpuUnavailable

    try:
        probe = sglang_servers.gpu_probe()
    except GpuUnavailable as exc:
        _fail(sglang_settings, str(exc))
    if probe is None:
        pytest.skip(f"GPU state unavailable: {sglang_servers.gpu_skip_reason}")
    return probe


def stop_started(config: pytest.Config) -> None:
    """Stop what the session started and still runs: Ray load workers, the launched server.

    Idempotent; it prints problems to standard error, never raises: it runs at the end of an
    interrupted session, and at exit.
    """
    started: list[tuple[str, Bench | ServerPool | None]] = [
        ("stopping the Ray load workers", config.stash.get(BENCH_KEY, None)),  # it keeps them
        ("teardown", config.stash.get(POOL_KEY, None)),  # the launched servers
    ]
    for what, owner in started:
        if owner is not None:
            try:
                owner.close()
            except Exception as exc:  # at the end, say it: nothing else will
                message = settings_of(config).redact(f"sglang: {what}: {exc}")
                print(message, file=sys.stderr)  # noqa: T201


def unreported_properties(config: pytest.Config) -> list[tuple[str, object]]:
    """Return, once, ``user_properties`` for the measurements no test has recorded.

    Those taken for tests that have not run (declared), and those cut while being taken:
    an interrupted test carries them to the reports.
    """
    bench = config.stash.get(BENCH_KEY, None)
    if bench is None:
        return []
    settings = bench.pool.settings
    return [
        prop
        for result, server in bench.take_unreported()
        for prop in _measurement_properties(result, server, settings)
    ]
