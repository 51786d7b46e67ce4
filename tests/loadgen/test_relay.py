from __future__ import annotations

import threading

from pytest_sglang.loadgen.records import RequestRecord
from pytest_sglang.loadgen.relay import ProgressSum, Relay, Sender


def record(index: int) -> RequestRecord:
    return RequestRecord(index=index, warmup=False, input_len=4, output_len=4, end=1.0)


def test_a_relay_hands_over_each_record_once_and_nothing_when_nothing_changed() -> None:
    relay = Relay()
    assert relay.take() is None
    relay.finished(record(0))
    relay.progress(1, 4, 4, 0.5)
    counts, records = relay.take() or ((0, 0, 0, 0.0), [])
    assert counts[:3] == (1, 4, 4) and [r.index for r in records] == [0]
    assert relay.take() is None
    relay.progress(2, 4, 8, 1.0)  # progress alone is news
    counts, records = relay.take() or ((0, 0, 0, 0.0), [record(9)])
    assert counts[:3] == (2, 4, 8) and records == []


def test_the_sender_sends_the_last_batch_before_it_stops() -> None:
    relay = Relay()
    sent: list[tuple[str, object, list[RequestRecord]]] = []
    sender = Sender(relay, sent.append, interval=60.0)  # no tick during the test
    for i in range(3):
        relay.finished(record(i))
    relay.progress(3, 3, 12, 0.1)
    sender.stop()
    assert [r.index for _, _, records in sent for r in records] == [0, 1, 2]
    assert not any(t.name == "sglang-relay" for t in threading.enumerate())


def test_progress_sums_the_workers_and_keeps_what_each_sent() -> None:
    calls: list[tuple[int, int, int]] = []
    heard = ProgressSum(lambda d, t, o, e: calls.append((d, t, o)), interval=0.0)
    heard.add(0, (2, 10, 20, 0.0), [record(0), record(2)])
    heard.add(1, (3, 10, 30, 0.0), [record(1)])
    heard.add(0, (4, 10, 40, 0.0), [record(4)])
    assert calls[-1] == (7, 20, 70)  # each worker's latest counts, summed
    assert [r.index for r in heard.received(0)] == [0, 2, 4]
    assert heard.received(5) == []
