"""``/metrics``: present only with ``--enable-metrics``, SGLang's names and labels (§1.8, §3)."""

from __future__ import annotations

import re

from pytest_sglang.testing import EmulatorProcess
from tests.emulator.conftest import MODEL, Shared, client

SAMPLE = re.compile(r'^(sglang:[a-z0-9_]+)(\{([a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*)?\})? (\S+)$')


def scrape(emulator: EmulatorProcess) -> dict[str, list[tuple[dict[str, str], float]]]:
    with client(emulator) as http:
        response = http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in response.text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) sglang:[a-z0-9_]+ ", line), line
            continue
        match = SAMPLE.match(line)
        assert match, line
        labels = dict(re.findall(r'([a-z_]+)="([^"]*)"', match.group(3) or ""))
        assert list(labels) == sorted(labels), line
        samples.setdefault(match.group(1), []).append((labels, float(match.group(5))))
    return samples


def test_metrics_absent_without_the_flag(shared_emulator: Shared) -> None:
    emulator = shared_emulator("--emulator-version", "0.5.5", "--speculative-algorithm", "EAGLE")
    with client(emulator) as http:
        response = http.get("/metrics")
    assert response.status_code == 404
    assert response.json() == {"detail": "Not Found"}


def test_metrics_names_and_labels(emulator: EmulatorProcess) -> None:
    with client(emulator) as http:
        http.post(
            "/generate",
            json={"text": "a b c", "sampling_params": {"max_new_tokens": 5, "ignore_eos": True}},
        )
        with http.stream(
            "POST",
            "/generate",
            json={
                "text": "a",
                "stream": True,
                "sampling_params": {"max_new_tokens": 3, "ignore_eos": True},
            },
        ) as r:
            r.read()
    samples = scrape(emulator)
    for name in (
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:gen_throughput",
        "sglang:prompt_tokens_total",
        "sglang:generation_tokens_total",
        "sglang:num_requests_total",
        "sglang:time_to_first_token_seconds_bucket",
        "sglang:inter_token_latency_seconds_bucket",
        "sglang:e2e_request_latency_seconds_bucket",
        "sglang:e2e_request_latency_seconds_count",
        "sglang:token_usage",
        "sglang:spec_accept_length",
    ):
        assert name in samples, name
    (running,) = samples["sglang:num_running_reqs"]
    assert running[0] == {
        "engine_type": "unified",
        "model_name": MODEL,
        "moe_ep_rank": "0",
        "pp_rank": "0",
        "tp_rank": "0",
    }
    streaming = {
        labels["is_streaming"]: value for labels, value in samples["sglang:num_requests_total"]
    }
    assert streaming["true"] >= 1 and streaming["false"] >= 2  # the warm-up counts too
    buckets = [
        labels["le"]
        for labels, _ in samples["sglang:time_to_first_token_seconds_bucket"]
        if labels["is_streaming"] == "true"
    ]
    assert buckets[0] == "0.1" and buckets[-1] == "+Inf" and len(buckets) == 19
    generated = {
        labels["is_streaming"]: value for labels, value in samples["sglang:generation_tokens_total"]
    }
    assert generated["true"] >= 3


def test_speculative_metrics(spec_emulator: EmulatorProcess) -> None:
    with client(spec_emulator) as http:
        http.post(
            "/generate",
            json={"text": "z", "sampling_params": {"max_new_tokens": 120, "ignore_eos": True}},
        )
    samples = scrape(spec_emulator)
    ((_, accept),) = samples["sglang:spec_accept_length"]
    assert 1.5 <= accept <= 2.0
    ((_, verifies),) = samples["sglang:spec_verify_calls_total"]
    assert verifies >= 59
    ((_, draft_tokens),) = samples["sglang:spec_num_draft_tokens"]
    assert draft_tokens == 4
