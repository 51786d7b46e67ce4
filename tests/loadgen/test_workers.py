from __future__ import annotations

import os
import pickle
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

from pytest_sglang.loadgen.placement import run_on_workers
from pytest_sglang.loadgen.records import LoadRun, RequestRecord
from pytest_sglang.loadgen.runner import LoadGenerator
from pytest_sglang.loadgen.schedule import ClosedLoop, OpenLoop, owner, slot_shares
from pytest_sglang.loadgen.workers import Message, RunPlan, coordinate, run_sharded, serve
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.measurement import measure
from pytest_sglang.testing import running_emulator

pytestmark = pytest.mark.slow


def test_slots_split_evenly_and_requests_follow_them() -> None:
    assert slot_shares(10, 3) == [4, 3, 3]
    assert slot_shares(2, 2) == [1, 1]
    shares = [3, 2]
    owners = [owner(i, shares) for i in range(10)]
    assert owners == [0, 0, 0, 1, 1, 0, 0, 0, 1, 1]


def max_in_flight(run: LoadRun) -> int:
    events = sorted(
        [(r.sent, 1) for r in run.measured] + [(r.end or r.sent, -1) for r in run.measured]
    )
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def test_a_closed_loop_over_two_processes_keeps_c_in_flight_in_total(tmp_path: Path) -> None:
    workload = Workload(input_len=8, output_len=32, requests=48, warmup=4)
    with running_emulator(tmp_path, "--emulator-decode-ms", "2") as emulator:
        plan = RunPlan({"url": emulator.url}, workload, ClosedLoop(8))
        run = run_sharded(plan, 2)
    m = measure(run)
    assert m.failed == 0 and m.completed == 48
    assert sorted(r.index for r in run.measured) == list(range(48))
    # One time base: every measured request was sent after the common start.
    assert min(r.sent for r in run.measured) >= run.started
    assert max_in_flight(run) == 8
    assert run.client is not None and run.client.samples > 0


def test_an_open_loop_over_two_processes_keeps_the_schedule(tmp_path: Path) -> None:
    workload = Workload(input_len=8, output_len=8, requests=40, warmup=0)
    with running_emulator(tmp_path) as emulator:
        plan = RunPlan({"url": emulator.url}, workload, OpenLoop(40.0, "poisson"))
        run = run_sharded(plan, 2)
    offsets = OpenLoop(40.0).offsets(40, f"{workload.seed}/open/poisson/40/r0")
    scheduled = {r.index: r.scheduled for r in run.measured}
    origin = min(s for s in scheduled.values() if s is not None) - offsets[0]
    for index, offset in enumerate(offsets):
        assert scheduled[index] == pytest.approx(origin + offset, abs=1e-6)
    m = measure(run)
    # Whether each send left on time is judged (the check fails, rightly, on a loaded
    # machine), not required: the schedule itself is what is checked above.
    assert m.failed == 0 and m.check("schedule").passed is not None


def test_a_single_process_reference_agrees(tmp_path: Path) -> None:
    workload = Workload(input_len=8, output_len=16, requests=16, warmup=0)
    with running_emulator(tmp_path) as emulator:
        sharded = run_sharded(RunPlan({"url": emulator.url}, workload, ClosedLoop(4)), 2)
        single = LoadGenerator(emulator.url).run_closed_loop(workload, 4)
    assert [r.output_tokens for r in sharded.measured] == [r.output_tokens for r in single.measured]


def _workers_of_this_process() -> list[psutil.Process]:
    return [
        child
        for child in psutil.Process().children()
        if any("spawn_main" in part for part in child.cmdline())
    ]


def test_a_killed_worker_is_counted_as_failed_requests_not_a_hang(tmp_path: Path) -> None:
    workload = Workload(input_len=8, output_len=100, requests=40, warmup=0)
    result: dict[str, LoadRun] = {}
    going = threading.Event()

    def note(done: int, total: int, output_tokens: int, elapsed: float) -> None:
        if done > 0:  # no warm-up: measured requests are finishing
            going.set()

    with running_emulator(tmp_path, "--emulator-decode-ms", "5") as emulator:
        plan = RunPlan({"url": emulator.url}, workload, ClosedLoop(4))
        thread = threading.Thread(
            target=lambda: result.update(run=run_sharded(plan, 2, progress=note))
        )
        started = time.monotonic()
        thread.start()
        assert going.wait(timeout=60), "no measured request finished"
        victim = _workers_of_this_process()[0]
        os.kill(victim.pid, signal.SIGKILL)
        thread.join(timeout=120)
    assert not thread.is_alive()
    assert time.monotonic() - started < 60
    m = measure(result["run"])
    assert 0 < m.failed < 40 and m.completed + m.failed == 40
    assert any("died with exit code -9" in message for message, _ in m.errors), m.errors


def test_the_workers_progress_is_reported_summed_over_them(tmp_path: Path) -> None:
    workload = Workload(input_len=8, output_len=100, requests=24, warmup=2)
    seen: list[tuple[int, int, int, float]] = []
    with running_emulator(tmp_path, "--emulator-decode-ms", "5") as emulator:
        plan = RunPlan({"url": emulator.url}, workload, ClosedLoop(4))
        run = run_sharded(plan, 2, progress=lambda d, t, o, e: seen.append((d, t, o, e)))
    assert measure(run).completed == 24
    # Lines while it ran (each request takes ~0.5 s; batches come every second), then one
    # at the end with everything: warm-up and measured requests, every token.
    assert len(seen) >= 2
    done, total, tokens, elapsed = seen[-1]
    warmed = [r for r in run.records if r.warmup]
    assert warmed and (done, total) == (24 + len(warmed), 24 + len(warmed))
    assert tokens == sum(r.output_tokens or 0 for r in run.records) == (24 + len(warmed)) * 100
    assert elapsed > 0
    assert [c[0] for c in seen] == sorted(c[0] for c in seen)


def test_a_killed_worker_keeps_the_requests_it_had_finished(tmp_path: Path) -> None:
    workload = Workload(input_len=8, output_len=100, requests=40, warmup=0)
    killed: list[int] = []

    def kill_one_once_going(done: int, total: int, output_tokens: int, elapsed: float) -> None:
        # Both workers run 2 slots at ~0.5 s a request: by 12 done, each sent back several.
        if done >= 12 and not killed:
            victim = _workers_of_this_process()[0]
            killed.append(victim.pid)
            os.kill(victim.pid, signal.SIGKILL)

    with running_emulator(tmp_path, "--emulator-decode-ms", "5") as emulator:
        plan = RunPlan({"url": emulator.url}, workload, ClosedLoop(4))
        run = run_sharded(plan, 2, progress=kill_one_once_going)
    assert killed
    m = measure(run)
    assert m.completed + m.failed == 40
    # The lost worker owned 20 requests: those it finished and sent back stay completed;
    # only the rest (in flight or not yet sent back, and never sent) are failed.
    assert 0 < m.failed < 20, (m.completed, m.failed)
    assert any("died with exit code -9" in message for message, _ in m.errors), m.errors


def test_a_run_plan_does_not_show_its_headers() -> None:
    # Its options carry the API key; a traceback under pytest -l prints a plan's repr.
    options = {"url": "http://h:1", "headers": {"Authorization": "Bearer sk-plan-secret"}}
    plan = RunPlan(options, Workload(input_len=8, output_len=8, requests=2), ClosedLoop(1))
    assert "sk-plan-secret" not in repr(plan)
    assert plan.options["headers"]["Authorization"] == "Bearer sk-plan-secret"


class _OneWorkerLost:
    """Two workers without processes: worker 0 sends its sessions' requests, worker 1 is lost."""

    name = "load worker"

    def __init__(self, workload: Workload, done: tuple[int, ...]) -> None:
        self.workload, self.done, self.started = workload, done, False

    def receive(self, pending: set[int]) -> list[tuple[int, Message]]:
        if not self.started:
            return [(i, ("ready", None, None)) for i in pending]
        records = tuple(
            RequestRecord(i, False, 8, 8, started=1.0, sent=1.0, end=2.0) for i in self.done
        )
        return [
            (0, ("ok", LoadRun(self.workload, ClosedLoop(2), records, 1.0), None)),
            (1, ("died", None, "gone")),
        ]

    def start(self, margin: float) -> list[float]:
        self.started = True
        return [0.0, 0.0]  # one clock

    def kill(self, index: int) -> str:
        raise AssertionError("nothing runs out of time here")


def test_a_lost_worker_fails_the_requests_of_its_own_sessions() -> None:
    # Sessions of two turns follow the slots: worker 0 owns sessions 0 and 2 (requests 0, 1,
    # 4, 5), worker 1 sessions 1 and 3; the lost worker's requests are the failed ones.
    workload = Workload(input_len=8, output_len=8, requests=8, warmup=0, endpoint="chat", turns=2)
    plan = RunPlan({"url": "http://unused"}, workload, ClosedLoop(2))
    run = coordinate(plan, plan.shares(2), _OneWorkerLost(workload, (0, 1, 4, 5)))
    assert sorted(r.index for r in run.measured) == list(range(8))
    assert sorted(r.index for r in run.measured if r.error == "gone") == [2, 3, 6, 7]


def test_a_workers_warm_up_is_progress_but_never_a_handed_over_record(tmp_path: Path) -> None:
    # A worker hands over progress from its first tick, warm-up included (a Ray actor's queue
    # is read from the start too); the records it hands over are measured ones only, so a
    # worker lost later is never credited with a warm-up request as a measured one.
    workload = Workload(input_len=8, output_len=300, requests=4, warmup=2)
    messages: list[Message] = []
    with running_emulator(tmp_path, "--emulator-decode-ms", "5") as emulator:
        plan = RunPlan({"url": emulator.url}, workload, ClosedLoop(2))
        serve(0, (2,), plan, messages.append, time.perf_counter)
    kinds = [kind for kind, _, _ in messages]
    ready = kinds.index("ready")
    assert "progress" in kinds[:ready]  # the warm-up (~1.5 s) outlasted a progress tick
    assert all(not m[2] for m in messages[:ready] if m[0] == "progress")
    handed = [r for m in messages if m[0] == "progress" for r in m[2]]
    kind, run, _ = messages[-1]
    assert kind == "ok" and isinstance(run, LoadRun)
    assert len([r for r in run.records if r.warmup]) == 2
    assert sorted(r.index for r in handed) == sorted(r.index for r in run.measured) == [0, 1, 2, 3]
    assert not any(r.warmup for r in handed)


class _Replayed:
    """One worker's messages as ``serve`` sent them, received again in order."""

    name = "load worker"

    def __init__(self, messages: list[Message]) -> None:
        self.messages = list(messages)

    def receive(self, pending: set[int]) -> list[tuple[int, Message]]:
        return [(0, self.messages.pop(0))] if self.messages else []

    def start(self, margin: float) -> list[float]:
        return [0.0]  # one clock

    def kill(self, index: int) -> str:
        raise AssertionError("nothing runs out of time here")


def test_a_message_a_worker_cannot_send_is_named_and_what_it_handed_over_stays(
    tmp_path: Path,
) -> None:
    # A pipe pickles each message it sends: a record that cannot be pickled fails the batch
    # holding it, and the outcome too. The worker then ends with an error naming why, so
    # the requests the coordinator did not get are failed with that reason, not silently.
    workload = Workload(input_len=8, output_len=100, requests=4, warmup=0)
    messages: list[Message] = []

    def send(message: Message) -> None:
        records = message[2] if message[0] == "progress" else getattr(message[1], "records", ())
        if any(r.index == 3 for r in records):
            raise pickle.PicklingError("record 3 cannot be pickled")
        messages.append(message)

    with running_emulator(tmp_path, "--emulator-decode-ms", "5") as emulator:
        plan = RunPlan({"url": emulator.url}, workload, ClosedLoop(1))
        serve(0, (1,), plan, send, time.perf_counter)
    kind, run, why = messages[-1]
    assert kind == "error" and run is None and isinstance(why, str)
    assert "PicklingError: record 3 cannot be pickled" in why
    handed = {r.index for m in messages if m[0] == "progress" for r in m[2]}
    assert 0 in handed and 3 not in handed  # ~0.5 s a request: record 0 went before record 3
    merged = coordinate(plan, (1,), _Replayed(messages))
    assert {r.index for r in merged.measured if r.ok} == handed
    failed = [r for r in merged.measured if not r.ok]
    assert {r.index for r in failed} == set(range(4)) - handed
    assert all(r.error == why for r in failed)


def test_a_cut_coordinator_keeps_what_the_workers_handed_over_and_stops_them(
    tmp_path: Path,
) -> None:
    # Ctrl-C lands in the coordinator (here: in its progress callback, once 6 measured
    # requests were handed over). Like a run in one process, the generator keeps the finished
    # part: the handed-over records, none of the requests never sent counted as failed.
    workload = Workload(input_len=8, output_len=100, requests=40, warmup=0)
    seen: list[int] = []

    def ctrl_c_once_going(done: int, total: int, output_tokens: int, elapsed: float) -> None:
        if done >= 6 and not seen:  # once: the cut run's last report returns
            seen.append(done)
            raise KeyboardInterrupt

    with running_emulator(tmp_path, "--emulator-decode-ms", "5") as emulator:
        generator = LoadGenerator(emulator.url, progress=ctrl_c_once_going)
        with pytest.raises(KeyboardInterrupt):
            run_on_workers(generator, workload, ClosedLoop(4), workers=2)
    assert _workers_of_this_process() == []
    cut = generator.interrupted_run
    assert cut is not None and seen
    assert len(cut.measured) >= seen[0] and all(r.ok for r in cut.measured)
    m = measure(cut)
    assert m.failed == 0 and m.completed == len(cut.measured) < 40
