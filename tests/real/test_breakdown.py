"""The TTFT split against the real server: its parts come from the server's own timings and
add up to the client's TTFT; the server's timestamps fall inside the client's window."""

from __future__ import annotations

import statistics
import time

import pytest

from pytest_sglang.loadgen.runner import LoadGenerator
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.breakdown import breakdown_summary, split_ttft
from pytest_sglang.measure.measurement import measure
from tests.real.realserver import ServerRun

pytestmark = pytest.mark.timeout(600)

#: Clock tolerance between the client's and the server's wall clocks (one machine; SGLang
#: converts its perf_counter stamps with an offset it calibrates now and then).
CLOCK = 0.001


def test_queue_prefill_rest_add_up_to_the_clients_ttft(real_server: ServerRun) -> None:
    workload = Workload(input_len=64, output_len=4, requests=16, endpoint="generate", warmup=2)
    offset = time.time() - time.perf_counter()  # this process's wall clock minus perf_counter
    run = LoadGenerator(real_server.url, model="tiny").run_closed_loop(workload, 4)
    records = run.measured
    assert all(r.ok for r in records), [r.error for r in records if not r.ok]
    summary = breakdown_summary([measure(run)])
    assert summary is not None
    # Every request carried the server's queue and prefill times.
    assert summary["split"] == summary["requests"] == 16
    residuals = []
    for record in records:
        split = split_ttft(record)
        assert split is not None and record.server_times is not None
        assert split.queue >= 0 and split.prefill > 0
        residuals.append(abs(split.queue + split.prefill + split.rest - split.ttft))
        # Causality across the two processes' clocks: the request reached the server after
        # the client sent it, and the first chunk left the server before the client had it.
        sent_wall = record.sent + offset
        first_wall = (record.first_token or 0.0) + offset
        times = record.server_times
        assert sent_wall <= times["request_received_ts"] + CLOCK
        assert times["request_received_ts"] <= times["forward_entry_time"] + CLOCK
        assert times["forward_entry_time"] <= times["prefill_finished_time"]
        assert times["prefill_finished_time"] <= times["response_sent_to_client_ts"] + CLOCK
        assert times["response_sent_to_client_ts"] <= first_wall + CLOCK
        # Hence the server's parts fit inside the client's TTFT.
        assert split.rest >= -CLOCK and split.transport is not None
        assert split.transport >= -CLOCK
    assert statistics.median(residuals) <= 0.001
