"""Multi-turn sessions: each turn sends the history; turns in order; the cache serves them."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from pytest_sglang.loadgen.prompts import request_body
from pytest_sglang.loadgen.runner import LoadGenerator
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.measurement import measure
from pytest_sglang.testing import running_emulator

SESSIONS = Workload(input_len=64, output_len=64, requests=32, endpoint="chat", turns=4,
                    warmup=0)  # fmt: skip


def test_each_turn_sends_the_whole_history() -> None:
    bodies = [request_body(SESSIONS, "run", i)["messages"] for i in range(5)]
    assert [len(m) for m in bodies] == [1, 3, 5, 7, 1]  # request 4 opens session 1
    for turn in range(1, 4):
        assert bodies[turn][: 2 * turn - 1] == bodies[turn - 1]  # the history, unchanged
        assert [m["role"] for m in bodies[turn]] == ["user", "assistant"] * turn + ["user"]
    assert len(bodies[3][-1]["content"].split()) == 64
    assert len(bodies[3][-2]["content"].split()) == 64  # an answer of output_len words
    assert bodies[4][0] != bodies[0][0]  # sessions differ
    assert SESSIONS.session(6) == (1, 2)
    # Words: turn t has (t + 1) user messages and t answers of 64; the previous turn is cached.
    assert SESSIONS.expected_cache_hit_ratio() == pytest.approx(576 / 1024)
    assert SESSIONS.lengths("run", 3) == (4 * 64 + 3 * 64, 64)


def test_bad_sessions_are_refused() -> None:
    with pytest.raises(ValueError, match="use endpoint='chat'"):
        Workload(input_len=8, output_len=4, turns=2)
    with pytest.raises(ValueError, match="turns must be None or an integer >= 1"):
        Workload(input_len=8, output_len=4, endpoint="chat", turns=0)
    with pytest.raises(ValueError, match="cannot be combined with prefix_groups"):
        Workload(input_len=8, output_len=4, endpoint="chat", turns=2, prefix_groups=2,
                 prefix_len=4)  # fmt: skip


def test_sharegpt_sessions_use_the_conversation(tmp_path: Path) -> None:
    path = tmp_path / "sharegpt.json"
    conversation = [{"from": "human" if i % 2 == 0 else "gpt", "value": f"message {i}"}
                    for i in range(6)]  # fmt: skip
    short = [{"from": "human", "value": "only"}, {"from": "gpt", "value": "one"}]
    path.write_text(json.dumps([{"conversations": conversation}, {"conversations": short}]))
    workload = Workload(input_len=100, output_len=8, requests=3, endpoint="chat", turns=3,
                        dataset=str(path))  # fmt: skip
    messages = request_body(workload, "r", 2)["messages"]
    # The conversation of one user turn is left out: a session needs three.
    assert [m["content"] for m in messages] == [f"message {i}" for i in range(5)]


@pytest.mark.slow
def test_later_turns_hit_the_prefix_cache(tmp_path: Path) -> None:
    """Against the emulator: turns in order, and the hit ratio the construction implies."""
    # OpenAI endpoints report cached tokens with --enable-cache-report, as SGLang's do.
    flags = ("--emulator-engine", "batch", "--emulator-speedup", "8", "--enable-cache-report")
    with running_emulator(tmp_path, *flags) as emulator:
        generator = LoadGenerator(emulator.url, flush_cache=True)
        run = measure(generator.run_closed_loop(SESSIONS, 4))
    assert run.failed == 0 and run.completed == 32
    by_index = {r.index: r for r in run.records}
    for index, record in by_index.items():
        turn = SESSIONS.session(index)[1]
        if turn:  # sent only once the previous turn's answer was complete
            previous = by_index[index - 1]
            assert previous.end is not None and record.sent >= previous.end
            # The whole previous prompt is served from the cache.
            assert record.cached_tokens == previous.prompt_tokens
    assert run.cache_hit_ratio is not None
    expected = SESSIONS.expected_cache_hit_ratio()
    assert abs(run.cache_hit_ratio - expected) <= 0.02, (run.cache_hit_ratio, expected)
    assert run.check("concurrency").passed is not False


@pytest.mark.slow
def test_sharegpt_sessions_hit_the_cache_too(tmp_path: Path) -> None:
    """Against the emulator: a dataset's conversations as sessions; later turns cached."""
    conversations = [
        {"conversations": [
            {"from": "human" if i % 2 == 0 else "gpt", "value": f"conversation {c} says {i} " * 8}
            for i in range(6)
        ]}
        for c in range(4)
    ]  # fmt: skip
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(conversations))
    workload = Workload(input_len=1000, output_len=8, requests=12, endpoint="chat", turns=3,
                        dataset=str(path), warmup=0)  # fmt: skip
    with running_emulator(tmp_path, "--enable-cache-report") as emulator:
        run = measure(LoadGenerator(emulator.url).run_closed_loop(workload, 2))
    assert run.failed == 0 and run.completed == 12
    by_index = {r.index: r for r in run.records}
    for index, record in by_index.items():
        if workload.session(index)[1]:
            assert record.cached_tokens == by_index[index - 1].prompt_tokens
    assert run.cache_hit_ratio is not None and run.cache_hit_ratio > 0.4


def test_the_concurrency_check_counts_sessions_not_requests() -> None:
    """A slot holds a session: its ramp-down tail is the longest session, not request."""
    from pytest_sglang.loadgen.records import LoadRun, RequestRecord
    from pytest_sglang.loadgen.schedule import ClosedLoop

    workload = Workload(input_len=4, output_len=1, requests=6, endpoint="chat", turns=3,
                        warmup=0)  # fmt: skip
    # Session 0: three turns of 1 s; session 1: three of 0.1 s, done long before.
    times = [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0), (0.0, 0.1), (0.1, 0.2), (0.2, 0.3)]

    def record(index: int, sent: float, end: float) -> RequestRecord:
        return RequestRecord(
            index=index, warmup=False, input_len=4, output_len=1, started=sent, sent=sent,
            end=end, chunk_times=[end], chunk_tokens=[1], output_tokens_server=1,
            output_tokens_client=1,
        )  # fmt: skip

    records = tuple(record(i, sent, end) for i, (sent, end) in enumerate(times))
    run = measure(LoadRun(workload, ClosedLoop(2), records, started=0.0))
    check = run.check("concurrency")
    # Realised 1.1 of 2: below a per-request floor (1.27), inside the per-session one.
    assert run.realised_concurrency == pytest.approx(1.1)
    assert check.passed is True and "longest session" in check.detail


@pytest.mark.slow
def test_sessions_arrive_on_an_open_loop_schedule(tmp_path: Path) -> None:
    """Open loop: sessions start on the schedule, each later turn after its answer."""
    flags = ("--emulator-engine", "batch", "--emulator-speedup", "8", "--enable-cache-report")
    with running_emulator(tmp_path, *flags) as emulator:
        generator = LoadGenerator(emulator.url, flush_cache=True)
        run = measure(generator.run_open_loop(SESSIONS, 20.0, arrival="constant"))
    assert run.failed == 0 and run.completed == 32
    by_index = {r.index: r for r in run.records}
    firsts = sorted(r.scheduled for r in run.records if r.scheduled is not None)
    assert len(firsts) == 8  # one arrival per session, 1/20 s apart
    assert [round(b - a, 6) for a, b in itertools.pairwise(firsts)] == [0.05] * 7
    for index, record in by_index.items():
        if SESSIONS.session(index)[1]:
            previous = by_index[index - 1]
            assert record.scheduled is None
            assert previous.end is not None and record.sent >= previous.end
            assert record.cached_tokens == previous.prompt_tokens
    assert run.cache_hit_ratio is not None
    assert abs(run.cache_hit_ratio - SESSIONS.expected_cache_hit_ratio()) <= 0.02


def test_an_open_loops_cap_is_on_requests_so_a_later_turn_queues_again(tmp_path: Path) -> None:
    """``max_concurrency`` caps requests in flight: due first turns go before a later turn."""
    sessions = Workload(input_len=8, output_len=16, requests=6, endpoint="chat", turns=2,
                        warmup=0)  # fmt: skip
    with running_emulator(tmp_path, "--emulator-decode-ms", "5") as emulator:
        # 1000 sessions/s: all three are due long before the first answer is complete.
        run = LoadGenerator(emulator.url).run_open_loop(
            sessions, 1000.0, arrival="constant", max_concurrency=1
        )
    assert measure(run).failed == 0
    order = [sessions.session(r.index) for r in sorted(run.measured, key=lambda r: r.sent)]
    assert order == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]
