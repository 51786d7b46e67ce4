from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sglang.measure.server_metrics import delta, parse_metrics, scrape

REAL = Path(__file__).with_name("data") / "sglang-0.5.23-cpu-metrics.txt"


def test_parses_a_real_sglang_scrape_summing_label_sets() -> None:
    snapshot = parse_metrics(REAL.read_text())
    # Streaming and non-streaming requests are two label sets of one counter.
    assert snapshot.get("num_requests_total") == 5.0
    assert snapshot.get("generation_tokens_total") == 23.0
    assert snapshot.get("prompt_tokens_total") == 24.0
    assert snapshot.get("cached_tokens_total") == 2.0
    assert snapshot.get("queue_time_seconds_count") is not None
    assert snapshot.get("no_such_metric") is None


def test_delta_derives_acceptance_cache_hits_and_queue_time() -> None:
    before = {
        "num_requests_total": 10, "generation_tokens_total": 1000,
        "prompt_tokens_total": 500, "cached_tokens_total": 100,
        "spec_verify_calls_total": 400, "queue_time_seconds_sum": 1.0,
        "queue_time_seconds_count": 10,
    }  # fmt: skip
    after = {
        "num_requests_total": 20, "generation_tokens_total": 3000,
        "prompt_tokens_total": 1500, "cached_tokens_total": 600,
        "spec_verify_calls_total": 1400, "queue_time_seconds_sum": 3.0,
        "queue_time_seconds_count": 20,
    }  # fmt: skip
    d = delta(before, after)
    assert (d["requests"], d["generation_tokens"], d["verify_calls"]) == (10, 2000, 1000)
    assert d["acceptance_length"] == 2.0
    assert d["cache_hit_ratio"] == 0.5
    assert d["mean_queue_time"] == pytest.approx(0.2)


def test_a_counter_that_went_down_means_a_restart() -> None:
    before = {"num_requests_total": 10, "generation_tokens_total": 9}
    after = {"num_requests_total": 2, "generation_tokens_total": 9}
    with pytest.raises(ValueError, match="restarted during the run"):
        delta(before, after)


def test_foreign_metrics_are_refused() -> None:
    with pytest.raises(ValueError, match="is this SGLang's /metrics"):
        delta({"up": 1}, {"up": 1})


@pytest.mark.slow
def test_server_acceptance_length_agrees_with_the_clients(tmp_path: Path) -> None:
    """Server-side acceptance from /metrics deltas against the client's from meta_info."""
    from pytest_sglang.loadgen.runner import LoadGenerator
    from pytest_sglang.loadgen.workload import Workload
    from pytest_sglang.measure.measurement import measure
    from pytest_sglang.testing import EAGLE3_FLAGS, running_emulator

    workload = Workload(input_len=32, output_len=64, requests=32, warmup=0)
    with running_emulator(
        tmp_path, *EAGLE3_FLAGS, "--enable-metrics", "--emulator-engine", "batch",
        "--emulator-speedup", "20",
    ) as emulator:  # fmt: skip
        before = scrape(emulator.url)
        run = LoadGenerator(emulator.url).run_closed_loop(workload, 8)
        after = scrape(emulator.url)
    assert before is not None and after is not None
    server = delta(before, after)
    client = measure(run)
    assert server["requests"] == 32 and server["generation_tokens"] == 32 * 64
    assert client.acceptance_length is not None and server["acceptance_length"] is not None
    assert server["acceptance_length"] == pytest.approx(client.acceptance_length, rel=0.01)
