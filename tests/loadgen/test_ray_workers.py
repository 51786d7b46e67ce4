"""Load workers as Ray actors on a local two-node Ray cluster, against the emulator (issue 16).

Nothing is faked: ``ray.cluster_utils.Cluster`` starts a real head node and a second node
(separate raylets and object stores on this host), the actors are real Ray actors, one on
each node, and the emulator is a real HTTP server process whose trace is the ground truth.
The cluster binds to the host's address (forcing 127.0.0.1 hangs Ray's node start); the
load itself goes to the emulator over loopback.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'pytest-sglang[ray]'")
cluster_utils = pytest.importorskip("ray.cluster_utils")

from pytest_sglang.emulator.engine.trace import read_trace  # noqa: E402
from pytest_sglang.loadgen.placement import run_on_workers  # noqa: E402
from pytest_sglang.loadgen.ray_pools import RayPools  # noqa: E402
from pytest_sglang.loadgen.ray_workers import RayLoadWorkers  # noqa: E402
from pytest_sglang.loadgen.records import LoadRun, RequestRecord  # noqa: E402
from pytest_sglang.loadgen.runner import LoadGenerator  # noqa: E402
from pytest_sglang.loadgen.schedule import ClosedLoop, OpenLoop  # noqa: E402
from pytest_sglang.loadgen.workers import RunPlan  # noqa: E402
from pytest_sglang.loadgen.workload import Workload  # noqa: E402
from pytest_sglang.measure.measurement import measure  # noqa: E402
from pytest_sglang.testing import running_emulator  # noqa: E402

#: Under pytest-xdist with --dist loadgroup, one worker runs the module: one cluster at a time.
pytestmark = [pytest.mark.xdist_group("ray-cluster"), pytest.mark.slow]

#: Each node's object store: the smallest Ray accepts comfortably (records are small).
OBJECT_STORE = 100 * 2**20
C = 8
INPUT_LEN = 16


def host_address() -> str:
    """This host's own address (the one Ray would pick): not loopback."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: picks the outgoing interface
        return str(probe.getsockname()[0])
    except OSError:
        return socket.gethostbyname(socket.gethostname())
    finally:
        probe.close()


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[Any]:
    """A head node and a second node, one CPU each: one load actor lands on each."""
    ip = host_address()
    cluster = cluster_utils.Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "object_store_memory": OBJECT_STORE,
            "include_dashboard": False,
            "node_ip_address": ip,
        },
    )
    try:
        cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE, node_ip_address=ip)
        ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def in_flight_peak(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at once (an end before a start at the same instant)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def trace_of(path: Path, run: LoadRun) -> list[dict[str, Any]]:
    """The trace lines of ``run``'s measured requests (the emulator must have stopped)."""
    clock, lines, _ = read_trace(path)
    shift = clock["monotonic"] - clock["wall"]  # wall -> perf_counter (one clock on Linux)
    start = min(r.sent for r in run.measured)
    ours = [
        line
        for line in lines
        if line["http_received"] is not None
        and line["t"]
        and line["prompt_tokens"] == INPUT_LEN
        and line["arrived"] + shift >= start - 0.05
    ]
    for line in ours:
        line["arrived"] += shift
        line["t"] = [t + shift for t in line["t"]]
    return ours


def client_intervals(records: tuple[RequestRecord, ...]) -> list[tuple[float, float]]:
    return [(r.sent, r.end or r.sent) for r in records]


def test_two_actors_on_two_nodes_keep_c_in_flight_in_total(
    two_nodes: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    trace = tmp_path / "trace.jsonl"
    workload = Workload(input_len=INPUT_LEN, output_len=64, requests=240, warmup=C)
    argv = ("--emulator-engine", "batch", "--emulator-speedup", "10", "--emulator-trace",
            str(trace), "--max-running-requests", "64")  # fmt: skip
    with running_emulator(tmp_path, *argv) as emulator:
        plan = RunPlan({"url": emulator.url}, workload, ClosedLoop(C))
        with RayLoadWorkers(2, num_cpus=1) as workers:
            run = workers.run(plan, ready_timeout=120)
            clocks = workers.clocks
        emulator.stop()  # writes the trace out
    m = measure(run)
    assert (m.completed, m.failed) == (240, 0), m.errors
    assert sorted(r.index for r in run.measured) == list(range(240))
    # One actor on each node, each with its share of the C slots.
    assert len({clock.node_id for clock in clocks}) == 2, clocks
    for clock in clocks:
        # One host: the true offset is zero, so the estimate must be within its own bound.
        assert abs(clock.offset) <= clock.uncertainty + 1e-4, clock
        assert clock.uncertainty < 0.05, clock
    # The server's ground truth: never more than C in flight, and C reached (C per actor
    # would show 2C; a lost slot would never reach C).
    lines = trace_of(trace, run)
    assert len(lines) == 240
    assert in_flight_peak([(line["arrived"], line["t"][-1]) for line in lines]) == C
    # The merged records, on one time base, say the same.
    assert in_flight_peak(client_intervals(run.measured)) == C
    # Throughput within 2 % of the trace's.
    tokens = sum(line["completion_tokens"] for line in lines)
    window = max(line["t"][-1] for line in lines) - min(line["arrived"] for line in lines)
    truth = tokens / window
    assert m.output_throughput == pytest.approx(truth, rel=0.02), (m.output_throughput, truth)
    request.node.user_properties.append(("throughput", (m.output_throughput, truth)))
    request.node.user_properties.append(
        ("offsets_us", [(c.offset * 1e6, c.uncertainty * 1e6) for c in clocks])
    )


def test_an_open_loop_over_two_nodes_keeps_one_schedule(two_nodes: Any, tmp_path: Path) -> None:
    workload = Workload(input_len=INPUT_LEN, output_len=8, requests=40, warmup=0)
    with running_emulator(tmp_path) as emulator:
        plan = RunPlan({"url": emulator.url}, workload, OpenLoop(40.0, "poisson"))
        with RayLoadWorkers(2, num_cpus=1) as workers:
            run = workers.run(plan, ready_timeout=120)
    m = measure(run)
    assert m.failed == 0 and m.completed == 40, m.errors
    # Each actor sent its own requests at their offsets on its own clock; moved onto ours,
    # they are one Poisson schedule from one origin.
    offsets = OpenLoop(40.0).offsets(40, f"{workload.seed}/open/poisson/40/r0")
    scheduled = {r.index: r.scheduled for r in run.measured}
    origin = min(s for s in scheduled.values() if s is not None) - offsets[0]
    for index, offset in enumerate(offsets):
        assert scheduled[index] == pytest.approx(origin + offset, abs=1e-6)
    # Whether each send left on time is judged (the check fails, rightly, on a loaded
    # machine), not required: the schedule itself is what is checked above.
    assert m.check("schedule").passed is not None


def _run_in_background(
    workers: RayLoadWorkers, plan: RunPlan, result: dict[str, Any]
) -> threading.Thread:
    """Start ``workers.run(plan)`` in a thread; return once every actor is ready.

    The run's outcome lands in ``result["run"]`` (or ``result["error"]``), its progress
    (requests done) in ``result["done"]``.
    """

    def progress(done: int, total: int, output_tokens: int, elapsed: float) -> None:
        result["done"] = done  # summed over the actors, warm-up included

    def work() -> None:
        try:
            result["run"] = workers.run(plan, ready_timeout=120, progress=progress)
        except BaseException as exc:  # shown by the caller's assertions
            result["error"] = exc

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not workers.clocks and time.monotonic() < deadline and thread.is_alive():
        time.sleep(0.05)  # the clocks are read once every actor is ready
    assert workers.clocks, result
    return thread


def _lost_worker_run(result: dict[str, Any], worker: str) -> tuple[Any, list[str]]:
    """Check a 60-request run that lost ``worker`` mid-way; return it and its messages."""
    assert "error" not in result, result.get("error")
    m = measure(result["run"])
    assert 0 < m.failed < 60 and m.completed + m.failed == 60, (m.completed, m.failed)
    messages = [message for message, _ in m.errors]
    assert any(f"{worker} was lost" in message for message in messages), messages
    return m, messages


def _wait_until_done(result: dict[str, Any], done: int) -> None:
    """Wait until ``done`` requests are done: into the measured ones, some handed over."""
    deadline = time.monotonic() + 60
    while result.get("done", 0) < done and time.monotonic() < deadline:
        time.sleep(0.05)
    assert result.get("done", 0) >= done, result


def test_a_killed_actor_is_counted_as_failed_requests_with_a_message(
    two_nodes: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    workload = Workload(input_len=INPUT_LEN, output_len=200, requests=60, warmup=0)
    result: dict[str, Any] = {}
    argv = ("--emulator-engine", "batch", "--emulator-speedup", "5")
    with running_emulator(tmp_path, *argv) as emulator:
        plan = RunPlan({"url": emulator.url}, workload, ClosedLoop(4))
        with RayLoadWorkers(2, num_cpus=1) as workers:
            thread = _run_in_background(workers, plan, result)
            _wait_until_done(result, 12)
            victim = workers.clocks[1]
            killed_at = time.monotonic()
            os.kill(victim.pid, signal.SIGKILL)
            thread.join(timeout=120)
            assert not thread.is_alive(), "the run hung after its worker was killed"
            verdict_after = time.monotonic() - killed_at
    m, messages = _lost_worker_run(
        result, f"Ray load worker 1 (node {victim.node}, pid {victim.pid})"
    )
    assert verdict_after < 30, verdict_after
    # The killed actor owned 30 requests; those it had finished and handed over stay
    # completed (both actors had finished several when it was killed).
    assert m.failed < 30, (m.completed, m.failed)
    request.node.user_properties.append(
        ("killed", (m.failed, m.completed, verdict_after, messages[0]))
    )


def test_ray_pools_keep_the_actors_from_run_to_run(two_nodes: Any, tmp_path: Path) -> None:
    workload = Workload(input_len=INPUT_LEN, output_len=8, requests=8, warmup=0)
    pools = RayPools()
    with running_emulator(tmp_path) as emulator:
        plan = RunPlan({"url": emulator.url}, workload, ClosedLoop(2))
        try:
            first = pools.get(two_nodes.address, 2, "the test")
            assert measure(first.run(plan)).completed == 8
            pids = [clock.pid for clock in first.clocks]
            again = pools.get(two_nodes.address, 2, "the test")
            assert again is first
            assert measure(again.run(plan)).completed == 8
            assert [clock.pid for clock in again.clocks] == pids  # the same actor processes
        finally:
            pools.close()
    deadline = time.monotonic() + 30
    while any(psutil.pid_exists(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(psutil.pid_exists(pid) for pid in pids), "an actor outlived close()"


def test_a_cut_coordinator_keeps_what_the_actors_handed_over(
    two_nodes: Any, tmp_path: Path
) -> None:
    # As with processes (test_workers.py): Ctrl-C in the coordinator, once 6 measured
    # requests were handed over, keeps them as the generator's cut run, none failed.
    workload = Workload(input_len=INPUT_LEN, output_len=100, requests=40, warmup=0)
    seen: list[int] = []

    def ctrl_c_once_going(done: int, total: int, output_tokens: int, elapsed: float) -> None:
        if done >= 6 and not seen:  # once: the cut run's last report returns
            seen.append(done)
            raise KeyboardInterrupt

    with running_emulator(tmp_path, "--emulator-decode-ms", "5") as emulator:
        generator = LoadGenerator(emulator.url, progress=ctrl_c_once_going)
        with pytest.raises(KeyboardInterrupt):
            run_on_workers(
                generator, workload, ClosedLoop(4), workers=2, ray_address=two_nodes.address
            )
    cut = generator.interrupted_run
    assert cut is not None and seen
    assert len(cut.measured) >= seen[0] and all(r.ok for r in cut.measured)
    m = measure(cut)
    assert m.failed == 0 and m.completed == len(cut.measured) < 40


RAY_SUITE = """
import ray
from pytest_sglang import Workload

def test_on_ray(sglang_bench):
    result = sglang_bench("default", Workload(input_len=8, output_len=16, requests=24, warmup=2),
                          concurrency=4, repeats=1)
    (run,) = result.runs
    assert run.failed == 0 and run.completed == 24
    assert ray.is_initialized()  # connected to the cluster named on the command line
"""


def test_sglang_bench_runs_on_the_ray_cluster_it_is_given(
    two_nodes: Any, pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makepyfile(RAY_SUITE)
    with running_emulator(tmp_path) as emulator:
        # A separate process: this one is connected to the cluster already.
        result = pytester.runpytest_subprocess(
            f"--sglang-url={emulator.url}",
            f"-osglang_ray_address={two_nodes.address}",
            "-osglang_load_workers=2",
        )
    result.assert_outcomes(passed=1)


def test_no_cluster_and_an_unreachable_address_are_clear_errors(
    request: pytest.FixtureRequest,
) -> None:
    # In a fresh interpreter: this one is connected to the test cluster.
    code = (
        "from pytest_sglang.loadgen.ray_workers import connect, RayUnavailable\n"
        "for address in (None, '127.0.0.1:1'):\n"
        "    try:\n"
        "        connect(address, source='--sglang-ray-address')\n"
        "    except RayUnavailable as exc:\n"
        "        print('ERROR', exc)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env
    )
    errors = [line for line in done.stdout.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 2, done.stdout + done.stderr
    assert "no Ray cluster to run the load workers on" in errors[0]
    assert (
        "cannot connect to the Ray cluster at '127.0.0.1:1' (from --sglang-ray-address)"
        in (errors[1])
    )
    assert "ray start --head" in errors[1]
    seconds = time.monotonic() - started
    assert seconds < 60, seconds  # Ray alone retries an unreachable GCS for minutes
    request.node.user_properties.append(("refused_in", seconds))


def test_a_node_leaving_mid_run_is_counted_as_failed_requests_not_a_hang(
    two_nodes: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    workload = Workload(input_len=INPUT_LEN, output_len=200, requests=60, warmup=0)
    result: dict[str, Any] = {}
    node = two_nodes.list_all_nodes()[-1]  # the second node (the head stays)
    argv = ("--emulator-engine", "batch", "--emulator-speedup", "5")
    try:
        with running_emulator(tmp_path, *argv) as emulator:
            plan = RunPlan({"url": emulator.url}, workload, ClosedLoop(4))
            with RayLoadWorkers(2, num_cpus=1) as workers:
                thread = _run_in_background(workers, plan, result)
                (lost,) = [c for c in workers.clocks if c.node_id == node.node_id]
                _wait_until_done(result, 12)
                removed_at = time.monotonic()
                two_nodes.remove_node(node, allow_graceful=False)
                thread.join(timeout=120)
                assert not thread.is_alive(), "the run hung after a node left"
                verdict_after = time.monotonic() - removed_at
    finally:
        if len(two_nodes.list_all_nodes()) < 2:  # the node left: the next test needs two
            two_nodes.add_node(num_cpus=1, object_store_memory=OBJECT_STORE,
                               node_ip_address=host_address())  # fmt: skip
            two_nodes.wait_for_nodes()
    m, _ = _lost_worker_run(
        result, f"Ray load worker {lost.worker} (node {lost.node}, pid {lost.pid})"
    )
    assert verdict_after < 60, verdict_after
    request.node.user_properties.append(("node_lost", (m.failed, m.completed, verdict_after)))
