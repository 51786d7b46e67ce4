"""The clock arithmetic of Ray load workers (pure: no Ray, no clock, no sockets)."""

from __future__ import annotations

import pytest

from pytest_sglang.loadgen.ray_workers import estimate_offset, unreachable
from pytest_sglang.loadgen.records import RequestRecord


def test_the_shortest_round_trip_gives_the_offset_and_bounds_its_error() -> None:
    # A remote clock 100 s ahead; readings (t0, remote, t1) with asymmetric delays.
    samples = [
        (0.0, 100.009, 0.010),  # 10 ms round trip, answer read late: off by 4 ms
        (1.0, 101.0006, 1.001),  # 1 ms round trip: off by 0.1 ms
        (2.0, 102.001, 2.030),
    ]
    offset, round_trip = estimate_offset(samples)
    assert round_trip == pytest.approx(0.001)
    assert offset == pytest.approx(100.0001)
    assert abs(offset - 100.0) <= round_trip / 2
    with pytest.raises(ValueError, match="no clock readings"):
        estimate_offset([])


def test_records_move_onto_the_coordinators_clock_whole() -> None:
    record = RequestRecord(index=3, warmup=False, input_len=8, output_len=2, started=100.0,
                           sent=100.5, scheduled=100.25, end=102.0,
                           chunk_times=[101.0, 101.5])  # fmt: skip
    moved = record.shifted(-100.0)
    assert (moved.started, moved.sent, moved.scheduled, moved.end) == (0.0, 0.5, 0.25, 2.0)
    assert moved.chunk_times == [1.0, 1.5]
    # Durations (what TTFT, ITL and latency are made of) do not change.
    assert moved.ttft == record.ttft and moved.e2e == record.e2e
    assert record.started == 100.0  # the original is untouched
    assert record.as_dict(origin=100.0) == {**moved.as_dict(), "chunk_times": [1.0, 1.5]}


def test_chunk_gaps_are_said_once_per_chunk_after_the_first() -> None:
    record = RequestRecord(0, False, 8, 4, sent=0.0, chunk_times=[1.0, 1.5, 2.5],
                           chunk_tokens=[1, 2, 1])  # fmt: skip
    assert record.gaps == [(0.5, 2), (1.0, 1)]
    assert RequestRecord(1, False, 8, 1, chunk_times=[1.0], chunk_tokens=[1]).gaps == []


def test_an_address_without_a_port_is_left_to_ray() -> None:
    assert unreachable("auto") is None
    assert unreachable("head-node") is None
