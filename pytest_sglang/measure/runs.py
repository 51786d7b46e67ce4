"""One run of a measurement: its load sent wherever the session places it (``docs/scaling.md``).

Each run is a packed :class:`Measurement` with the server's ``/metrics`` deltas and GPU
telemetry; a dead server, or a run that gave up on it, ends the measurement (:class:`Interrupted`).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import gc
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytest_sglang.errors import GpuUnavailable, MeasurementFailed, SGLangError
from pytest_sglang.loadgen.ray_pools import RayPools
from pytest_sglang.loadgen.schedule import ClosedLoop, Load
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.checks import failure_kinds, telemetry_checks
from pytest_sglang.measure.measurement import Measurement, measure
from pytest_sglang.measure.results import packed
from pytest_sglang.measure.server_metrics import MetricsSnapshot, delta, scrape
from pytest_sglang.report.progress import RunLine

if TYPE_CHECKING:
    from pytest_sglang.gpu.probes import GpuProbe
    from pytest_sglang.loadgen.records import LoadRun
    from pytest_sglang.loadgen.runner import LoadGenerator
    from pytest_sglang.server.handle import SGLangServer
    from pytest_sglang.server.pool import ServerPool

__all__ = ["Interrupted", "Runner", "cut_by", "give_back_memory", "load_generator_for"]


@dataclasses.dataclass(eq=False)
class Interrupted(Exception):
    """A run that ended the measurement (its server died, or the run gave up)."""

    server: SGLangServer
    measurement: Measurement
    error: SGLangError

    def __str__(self) -> str:
        return str(self.error)  # not the fields' reprs: the server's URL, every metric


class Runner:
    """Takes runs: the part of a :class:`~pytest_sglang.measure.bench.Bench` that runs load.

    The load generator's limits and placement come from the settings; ``_during`` (the test
    measuring) and ``_server_failed`` (its report of a server's death) from the bench's view
    of that test.
    """

    def __init__(self, pool: ServerPool, *, run_line: RunLine | None = None) -> None:
        self.pool = pool
        self._run_line = run_line or RunLine(None)
        self._gpu = _gpu_probe(pool)
        self._ray_pools = RayPools()
        self._noted: set[tuple[str, int]] = set()
        self._during = ""
        self._server_failed: Callable[[str, SGLangError], None] = lambda name, error: None

    def close(self) -> None:
        """Release what is kept between runs (the Ray load-worker actors)."""
        self._ray_pools.close()

    def _run(
        self,
        server: SGLangServer,
        workload: Workload,
        load: Load,
        repeat: int,
        repeats: int,
        cuts: dict[str, LoadRun | None],
    ) -> Measurement:
        """Take run ``repeat`` (of ``repeats``) on ``server`` under ``load``.

        A run cut short (a test timeout, Ctrl-C) leaves its finished part in ``cuts``, under
        the server's name, for the report of the measurement it belongs to.

        :raises Interrupted: the server died (reported to ``_server_failed``), or the run gave
            up.
        """
        from pytest_sglang.gpu.telemetry import TelemetrySampler
        from pytest_sglang.loadgen.placement import run_on_workers
        from pytest_sglang.loadgen.runner import ServerStoppedAnswering

        if server.kind == "openai" and workload.endpoint == "generate":
            raise ValueError(
                f"{server.name} ({server.url}) is declared OpenAI-compatible: it has no SGLang "
                "/generate endpoint; measure it (and the SGLang servers it is compared with) "
                'with Workload(endpoint="completions") or Workload(endpoint="chat")'
            )
        if isinstance(load, ClosedLoop):
            self._note_cap(server, load.concurrency)
        label = f"{server.name} {load.describe()} run {repeat + 1}/{repeats}"
        line, last = "", time.monotonic()
        live = self._run_line

        def progress(done: int, total: int, output_tokens: int, elapsed: float) -> None:
            # In place on a terminal; elsewhere a line every 10 s, for CI logs.
            nonlocal line, last
            rate = output_tokens / elapsed if elapsed > 0 else 0.0
            line = f"sglang: measuring {label}: {done}/{total} requests, {rate:.0f} output tok/s"
            live.show(line)
            if time.monotonic() - last >= 10.0 and not live.in_place and not live.quiet:
                last = time.monotonic()
                self.pool.say(line)

        launch, sampler = server.launch, None
        # A launch samples the GPUs it was pinned to (none: the emulator without fake GPUs);
        # an attached server, every GPU of the probe's host.
        if self._gpu is not None and (launch is None or launch.gpus):
            pids = frozenset({launch.pid} if launch is not None and launch.pid else ())
            uuids = None if launch is None else launch.gpus
            sampler = TelemetrySampler(self._gpu, uuids, allowed_pids=pids)
        scrapes: list[MetricsSnapshot | None] = []

        def before_measured() -> None:
            scrapes.append(_scrape(server))
            if sampler is not None:
                sampler.start()

        settings = self.pool.settings
        generator = load_generator_for(
            server,
            progress=progress,
            before_measured=before_measured,
            request_timeout=settings.request_timeout.value,
            stall_timeout=settings.stall_timeout.value,
            first_token_timeout=settings.first_token_timeout.value,
            # 0: never stop a run early for unanswered requests.
            max_consecutive_failures=settings.max_consecutive_failures.value or None,
        )
        stopped: str | None = None  # why the run gave up; its records go with ``run``
        try:  # where the load runs: docs/scaling.md
            run = run_on_workers(
                generator, workload.for_concurrency(load.slots or 1), load,
                workers=settings.load_workers.value, ray_address=settings.ray_address.value,
                ray_source=settings.ray_address.source, repeat=repeat,
                before_measured=before_measured, ray_pools=self._ray_pools,
            )  # fmt: skip
        except ServerStoppedAnswering as exc:
            stopped, run = str(exc), exc.run
        except BaseException:
            cuts[server.name] = generator.interrupted_run
            raise
        finally:
            if sampler is not None and sampler.started_at:
                sampler.stop()
        if line:
            live.end(line)
        measurement = measure(run)
        before = scrapes[0] if scrapes and stopped is None else None
        after = before and _scrape(server)
        if before and after:
            with contextlib.suppress(ValueError):  # restarted, or not SGLang's counters
                measurement = dataclasses.replace(measurement, server_counters=delta(before, after))
        if sampler is not None and sampler.started_at:
            summary = sampler.summary(measurement.output_tokens)
            measurement = dataclasses.replace(
                measurement,
                gpu_telemetry=summary,
                checks=measurement.checks + telemetry_checks(summary),
            )
        measurement = packed(measurement)
        del run, generator
        give_back_memory()
        if measurement.failed or stopped is not None:
            # A server that died under the load ends the measurement, naming its death; a
            # dying process gets a moment to be reaped when the run looks like a death.
            tail = measurement.records[-5:]
            wait = 2.0 if stopped is not None or (tail and all(not r.ok for r in tail)) else 0.0
            died = self.pool.check(server.name, during=self._during, wait=wait)
            if died is not None:
                self._server_failed(server.name, died)
                lost = died.extended(
                    f"\n  the measurement ({server.name} {load.describe()}, run {repeat + 1}) "
                    f"lost {measurement.failed} of {measurement.requests} requests to it"
                )
                raise Interrupted(server, measurement, lost)
        if stopped is not None:
            message = [
                f"the measurement of {server.name} @ {load.describe()} ({server.url}) was "
                f"stopped in run {repeat + 1}: {stopped}",
                *failure_kinds(measurement.records),
                "  the server still accepts connections, but left that many requests in a row "
                "without an answer: read its log (a hung scheduler? streams that stall?)",
            ]
            raise Interrupted(server, measurement, MeasurementFailed("\n".join(message)))
        return measurement

    def _note_cap(self, server: SGLangServer, concurrency: int) -> None:
        """Say so when ``concurrency`` exceeds the requests the server runs at once."""
        cap, key = server.max_running_requests, (server.name, concurrency)
        if cap is None or cap < 1 or concurrency <= cap or key in self._noted:
            return
        self._noted.add(key)
        given = server.server_info.get("max_running_requests")
        source = "" if given == cap else f" (in effect; /server_info says {given})"
        self.pool.say(
            f"sglang: note: C={concurrency} exceeds {server.name}'s max_running_requests of "
            f"{cap}{source}: {concurrency - cap} requests at a time wait in the server's "
            "queue, and their TTFT includes that wait"
        )


def _gpu_probe(pool: ServerPool) -> GpuProbe | None:
    """Return the session's GPU telemetry reader, or None where no GPU is read.

    Its own, not the pool's: the pool's probe, once made, puts the GPUs' names into the report
    (and so into the baselines' fingerprints), which a measurement must not change. Read only
    for a server that holds GPUs (:meth:`Runner._run`).
    """
    from pytest_sglang.gpu.probes import make_probe

    settings = pool.settings
    if settings.launches_hold_no_gpus and not settings.servers:
        return None  # only launches that hold no GPU: nothing to read (no NVML, no ssh)
    try:
        return make_probe(host=settings.gpu_host.value, fake_dir=settings.gpu_fake.value)
    except GpuUnavailable:
        return None


def _scrape(server: SGLangServer) -> MetricsSnapshot | None:
    """Scrape the server's ``/metrics``; None where it serves none (its figures stand alone)."""
    import httpx

    try:
        return scrape(server.url, server.headers)
    except (httpx.HTTPError, ValueError):
        return None


def give_back_memory() -> None:
    """Return the memory a finished run freed to the system (``gc``, then glibc's ``malloc_trim``).

    Otherwise the C allocator keeps the run's peak, and a session of long runs grows.
    """
    gc.collect()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):  # not glibc (musl): no malloc_trim
            ctypes.CDLL(None).malloc_trim(0)


def cut_by(error: BaseException) -> str:
    """Name what cut a measurement short: pytest-timeout, Ctrl-C, or the error's kind."""
    if isinstance(error, KeyboardInterrupt):  # the session handles SIGTERM as Ctrl-C
        return "an interrupt (KeyboardInterrupt: Ctrl-C or SIGTERM)"
    text = " ".join(str(error).split())
    if "pytest-timeout" in text:
        return f"the test's pytest-timeout ({text.rstrip('.')})"
    return f"{type(error).__name__}: {text[:200]}" if text else type(error).__name__


def load_generator_for(server: SGLangServer, **options: Any) -> LoadGenerator:
    """Return a load generator for a server that passed the readiness gate.

    It gets the server's URL, headers, model id and connection habits; ``options`` are the
    other keyword arguments of :class:`~pytest_sglang.loadgen.runner.LoadGenerator`.
    """
    from pytest_sglang.loadgen.runner import LoadGenerator

    options.setdefault("connections", server.connections)
    return LoadGenerator(server.url, headers=server.headers, model=server.model.id, **options)
