from __future__ import annotations

import threading

import pytest

from pytest_sglang.loadgen.records import RequestRecord
from pytest_sglang.loadgen.workers import Message, ProgressSum, Relay


def record(index: int) -> RequestRecord:
    return RequestRecord(index=index, warmup=False, input_len=4, output_len=4, end=1.0)


def test_a_relay_sends_its_messages_in_order_each_record_once_all_before_it_stops() -> None:
    sent: list[Message] = []
    relay = Relay(sent.append)
    relay.finished(record(0))
    relay.progress(1, 4, 4, 0.5)
    relay.send(("ready", None, None))  # in order with the batches
    relay.progress(2, 4, 8, 1.0)  # progress alone is news
    for i in range(1, 4):
        relay.finished(record(i))
    relay.progress(4, 4, 16, 1.5)
    relay.stop()
    assert [(kind, counts) for kind, counts, _ in sent] == [
        ("progress", (1, 4, 4, 0.5)),
        ("ready", None),
        ("progress", (2, 4, 8, 1.0)),
        ("progress", (4, 4, 16, 1.5)),
    ]
    assert [[r.index for r in m[2]] if m[0] == "progress" else [] for m in sent] == [
        [0],
        [],
        [],
        [1, 2, 3],
    ]
    assert not any(t.name.startswith("sglang-relay") for t in threading.enumerate())


def test_progress_sums_the_workers_and_keeps_what_each_sent() -> None:
    calls: list[tuple[int, int, int]] = []
    heard = ProgressSum(lambda d, t, o, e: calls.append((d, t, o)), interval=0.0)
    heard.add(0, (2, 10, 20, 0.0), [record(0), record(2)])
    heard.add(1, (3, 10, 30, 0.0), [record(1)])
    heard.add(0, (4, 10, 40, 0.0), [record(4)])
    assert calls[-1] == (7, 20, 70)  # each worker's latest counts, summed
    assert [r.index for r in heard.records[0]] == [0, 2, 4]


def test_a_raising_progress_callback_is_turned_off_and_the_workers_records_are_kept() -> None:
    # As in a single process: a display bug must not lose a run spread over workers.
    def broken(done: int, total: int, output_tokens: int, elapsed: float) -> None:
        raise ZeroDivisionError("display bug")

    heard = ProgressSum(broken, interval=0.0)
    with pytest.warns(RuntimeWarning, match="the progress callback raised ZeroDivisionError"):
        heard.add(0, (1, 4, 4, 0.0), [record(0)])
    heard.add(0, (2, 4, 8, 0.0), [record(1)])  # off now: no second warning
    heard.report()
    assert [r.index for r in heard.records[0]] == [0, 1]
