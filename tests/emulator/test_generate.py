"""Native ``/generate``: shapes, batches, streaming, speculative stats, errors (§1.6, §2)."""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from typing import Any

import pytest

from pytest_sglang.testing import EmulatorProcess
from tests.emulator.conftest import client, sse_json

#: A non-streamed answer's meta_info with --enable-metrics, in the order the real 0.5.23
#: server writes it (tests/real/recorded/sglang-0.5.23-cpu.json, "generate plugin").
META_KEYS = [
    "id",
    "finish_reason",
    "prompt_tokens",
    "weight_version",
    "num_retractions",
    "storage_prefetch_wait",
    "storage_staging_wait",
    "forward_entry_time",
    "prefill_finished_time",
    "queue_time",
    "reasoning_tokens",
    "completion_tokens",
    "cached_tokens",
    "weight_versions",
    "cached_tokens_details",
    "dp_rank",
    "e2e_latency",
    "request_received_ts",
    "first_token_latency",
    "api_server_dispatch_finish_ts",
    "request_finished_ts",
    "decode_throughput",
    "response_sent_to_client_ts",
]


def generate(emulator: EmulatorProcess, body: dict[str, Any]) -> Any:
    with client(emulator) as http:
        response = http.post("/generate", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    return response.json()


def test_single_text_prompt(emulator: EmulatorProcess) -> None:
    out = generate(
        emulator,
        {
            "text": "Where is the Louvre museum",
            "sampling_params": {"max_new_tokens": 12, "ignore_eos": True},
        },
    )
    assert set(out) == {"text", "output_ids", "meta_info"}
    meta = out["meta_info"]
    assert list(meta) == META_KEYS
    assert re.fullmatch(r"[0-9a-f]{32}", meta["id"])
    assert meta["finish_reason"] == {"type": "length", "length": 12}
    assert meta["prompt_tokens"] == 5  # one token per whitespace-separated word
    assert meta["completion_tokens"] == len(out["output_ids"]) == 12
    assert meta["cached_tokens"] == 0 and meta["cached_tokens_details"] is None
    assert meta["e2e_latency"] > 0
    assert len(out["text"].split()) == 12
    assert not any(key.startswith("spec_") for key in meta)


def test_prefix_cache_reports_cached_tokens(emulator: EmulatorProcess) -> None:
    # SGLang's radix cache: a prompt seen before is served from cache but for its last token.
    body = {"input_ids": [7, 8, 9, 10, 11], "sampling_params": {"max_new_tokens": 2}}
    generate(emulator, body)
    meta = generate(emulator, body)["meta_info"]
    assert meta["cached_tokens"] == 4
    assert meta["cached_tokens_details"] == {"device": 4, "host": 0}
    # The warm-up request ("The capital city of France is") is cached too, as on SGLang.
    body = {"text": "The capital of Italy", "sampling_params": {"max_new_tokens": 2}}
    assert generate(emulator, body)["meta_info"]["cached_tokens"] == 2


def test_scheduler_times_in_meta_info(emulator: EmulatorProcess) -> None:
    before = time.time()
    meta = generate(emulator, {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 3}})[
        "meta_info"
    ]
    after = time.time()
    assert before <= meta["request_received_ts"] <= meta["api_server_dispatch_finish_ts"]
    assert meta["api_server_dispatch_finish_ts"] <= meta["forward_entry_time"]
    assert meta["forward_entry_time"] <= meta["prefill_finished_time"]
    assert meta["prefill_finished_time"] <= meta["request_finished_ts"]
    assert meta["request_finished_ts"] <= meta["response_sent_to_client_ts"] <= after
    assert 0 <= meta["queue_time"] <= meta["forward_entry_time"] - meta["request_received_ts"]
    assert 0 < meta["first_token_latency"] <= meta["e2e_latency"]
    assert meta["decode_throughput"] > 0
    assert meta["weight_versions"] == [{"version": "default", "start": 0, "end": 3}]


def test_no_scheduler_times_without_metrics(start_emulator: Any) -> None:
    emulator = start_emulator()
    meta = generate(emulator, {"input_ids": [5, 6], "sampling_params": {"max_new_tokens": 2}})[
        "meta_info"
    ]
    assert "queue_time" not in meta and "request_received_ts" not in meta
    assert "e2e_latency" in meta and "response_sent_to_client_ts" in meta


def test_output_is_deterministic(emulator: EmulatorProcess) -> None:
    body = {"text": "same prompt", "sampling_params": {"max_new_tokens": 8, "ignore_eos": True}}
    first, second = generate(emulator, body), generate(emulator, body)
    assert first["text"] == second["text"]
    assert first["output_ids"] == second["output_ids"]


def test_default_max_new_tokens_is_128(emulator: EmulatorProcess) -> None:
    out = generate(emulator, {"input_ids": [1, 2, 3], "sampling_params": {"ignore_eos": True}})
    assert out["meta_info"]["completion_tokens"] == 128
    assert out["meta_info"]["prompt_tokens"] == 3


def test_without_ignore_eos_the_model_stops_by_itself(emulator: EmulatorProcess) -> None:
    out = generate(emulator, {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 500}})
    meta = out["meta_info"]
    assert 32 <= meta["completion_tokens"] <= 128
    assert meta["finish_reason"] == {"type": "stop", "matched": 128009}
    assert out["output_ids"][-1] == 128009


def test_batch_returns_a_list(emulator: EmulatorProcess) -> None:
    outs = generate(
        emulator,
        {
            "text": ["one two", "three"],
            "sampling_params": {"max_new_tokens": 4, "ignore_eos": True},
        },
    )
    assert isinstance(outs, list) and len(outs) == 2
    assert [o["meta_info"]["prompt_tokens"] for o in outs] == [2, 1]
    assert outs[0]["meta_info"]["id"] != outs[1]["meta_info"]["id"]


def test_batch_of_input_ids_with_per_prompt_sampling(emulator: EmulatorProcess) -> None:
    outs = generate(
        emulator,
        {
            "input_ids": [[1, 2], [3, 4, 5]],
            "sampling_params": [
                {"max_new_tokens": 2, "ignore_eos": True},
                {"max_new_tokens": 5, "ignore_eos": True},
            ],
        },
    )
    assert [o["meta_info"]["completion_tokens"] for o in outs] == [2, 5]


def test_parallel_samples_make_a_batch(emulator: EmulatorProcess) -> None:
    outs = generate(
        emulator,
        {"text": "x", "sampling_params": {"n": 3, "max_new_tokens": 2, "ignore_eos": True}},
    )
    assert isinstance(outs, list) and len(outs) == 3


def test_put_is_accepted_and_get_is_405(emulator: EmulatorProcess) -> None:
    with client(emulator) as http:
        put = http.put("/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 1}})
        get = http.get("/generate")
    assert put.status_code == 200
    assert get.status_code == 405
    assert get.json() == {"detail": "Method Not Allowed"}


def test_stream_is_cumulative_and_ends_with_done(emulator: EmulatorProcess) -> None:
    body = {
        "text": "a b",
        "stream": True,
        "sampling_params": {"max_new_tokens": 6, "ignore_eos": True},
    }
    with client(emulator) as http, http.stream("POST", "/generate", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_json(response)
    assert len(events) == 6
    for previous, current in itertools.pairwise(events):
        assert current["text"].startswith(previous["text"])
        assert current["output_ids"][: len(previous["output_ids"])] == previous["output_ids"]
    metas = [event["meta_info"] for event in events]
    assert [m["completion_tokens"] for m in metas] == [1, 2, 3, 4, 5, 6]
    assert all(m["finish_reason"] is None for m in metas[:-1])
    assert metas[-1]["finish_reason"] == {"type": "length", "length": 6}
    assert "e2e_latency" not in metas[0] and "e2e_latency" in metas[-1]
    assert len({m["id"] for m in metas}) == 1
    # Stamped once, on the first chunk, and repeated among the final chunk's times.
    sent = [m.get("response_sent_to_client_ts") for m in metas]
    assert sent[0] is not None and sent[-1] == sent[0] and sent[1:-1] == [None] * 4
    assert metas[0]["forward_entry_time"] <= metas[0]["prefill_finished_time"] <= sent[0]
    assert metas[-1]["request_received_ts"] <= metas[0]["forward_entry_time"]
    assert "index" not in events[0]


def test_batch_stream_carries_index(emulator: EmulatorProcess) -> None:
    body = {
        "text": ["a", "b"],
        "stream": True,
        "sampling_params": {"max_new_tokens": 3, "ignore_eos": True},
    }
    with client(emulator) as http, http.stream("POST", "/generate", json=body) as response:
        events = sse_json(response)
    assert sorted(event["index"] for event in events) == [0, 0, 0, 1, 1, 1]
    finals = [e for e in events if e["meta_info"]["finish_reason"] is not None]
    assert sorted(e["index"] for e in finals) == [0, 1]


def test_incremental_output_and_stream_interval(start_emulator: Any) -> None:
    emulator = start_emulator("--incremental-streaming-output", "--stream-interval", "2")
    body = {
        "text": "a",
        "stream": True,
        "sampling_params": {"max_new_tokens": 5, "ignore_eos": True},
    }
    with client(emulator) as http, http.stream("POST", "/generate", json=body) as response:
        events = sse_json(response)
    assert [len(e["output_ids"]) for e in events] == [2, 2, 1]
    assert [e["meta_info"]["completion_tokens"] for e in events] == [2, 4, 5]
    assert "".join(e["text"] for e in events).count(" ") == 5


def test_speculative_meta_info(spec_emulator: EmulatorProcess) -> None:
    out = generate(
        spec_emulator, {"text": "x", "sampling_params": {"max_new_tokens": 65, "ignore_eos": True}}
    )
    meta = out["meta_info"]
    verify = meta["spec_verify_ct"]
    assert meta["completion_tokens"] == 65
    assert meta["completion_tokens"] / verify == pytest.approx(2.0, abs=0.1)
    assert meta["spec_accept_length"] == meta["completion_tokens"] / verify
    assert meta["spec_num_proposed_drafts"] == verify * 3
    assert meta["spec_num_correct_drafts"] == 65 - 1 - verify
    assert meta["spec_accept_rate"] == meta["spec_num_correct_drafts"] / (verify * 3)
    assert sum(meta["spec_correct_drafts_histogram"]) == verify


def test_speculative_stream_sends_multi_token_chunks(spec_emulator: EmulatorProcess) -> None:
    body = {
        "text": "x",
        "stream": True,
        "sampling_params": {"max_new_tokens": 21, "ignore_eos": True},
    }
    with client(spec_emulator) as http, http.stream("POST", "/generate", json=body) as response:
        events = sse_json(response)
    counts = [e["meta_info"]["completion_tokens"] for e in events]
    deltas = [b - a for a, b in itertools.pairwise([0, *counts])]
    assert deltas[0] == 1 and set(deltas[1:]) == {2}
    assert all("spec_verify_ct" not in e["meta_info"] for e in events[:-1])
    assert events[-1]["meta_info"]["spec_verify_ct"] == 10


def test_server_wide_accept_length_appears_after_enough_decoding(
    spec_emulator: EmulatorProcess,
) -> None:
    generate(
        spec_emulator, {"text": "y", "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}}
    )
    with client(spec_emulator) as http:
        state = http.get("/server_info").json()["internal_states"][0]
    assert state["avg_spec_accept_length"] == pytest.approx(2.0, abs=0.1)
    assert state["last_gen_throughput"] > 0


def test_old_version_meta_info(old_emulator: EmulatorProcess) -> None:
    out = generate(
        old_emulator, {"text": "x", "sampling_params": {"max_new_tokens": 9, "ignore_eos": True}}
    )
    meta = out["meta_info"]
    assert "total_retractions" in meta and "num_retractions" not in meta
    assert "reasoning_tokens" not in meta and "response_sent_to_client_ts" not in meta
    assert meta["spec_verify_ct"] == 4
    assert set(meta) >= {
        "spec_accept_rate",
        "spec_accept_length",
        "spec_accept_token_num",
        "spec_draft_token_num",
    }


def test_over_long_input_is_400(emulator: EmulatorProcess) -> None:
    with client(emulator) as http:
        too_long = http.post("/generate", json={"input_ids": [1] * 2048})
        too_many = http.post(
            "/generate", json={"input_ids": [1] * 100, "sampling_params": {"max_new_tokens": 1948}}
        )
        fits = http.post(
            "/generate", json={"input_ids": [1] * 100, "sampling_params": {"max_new_tokens": 1947}}
        )
    assert too_long.status_code == 400
    assert too_long.json() == {
        "error": {
            "message": "The input (2048 tokens) is longer than the model's context length "
            "(2048 tokens)."
        }
    }
    assert too_many.status_code == 400
    message = too_many.json()["error"]["message"]
    assert message.startswith(
        "Requested token count exceeds the model's maximum context length of 2048 tokens. "
        "You requested a total of 2048 tokens"
    )
    assert fits.status_code == 200


def test_over_long_input_in_a_stream_is_an_error_event(emulator: EmulatorProcess) -> None:
    body = {"input_ids": [1] * 3000, "stream": True}
    with client(emulator) as http, http.stream("POST", "/generate", json=body) as response:
        assert response.status_code == 200
        (event,) = sse_json(response)
    assert event["error"]["code"] == 400
    assert event["error"]["type"] == "invalid_request_error"
    assert "longer than the model's context length" in event["error"]["message"]


@pytest.mark.parametrize(
    ("body", "status", "check"),
    [
        (
            {"sampling_params": {}},
            400,
            {"error": {"message": "Either text, input_ids or input_embeds should be provided."}},
        ),
        ({"text": 5}, 400, "contract"),
        (
            {"text": "x", "sampling_params": {"max_new_tokens": -1}},
            400,
            {"error": {"message": "max_new_tokens must be at least 0, got -1."}},
        ),
        (
            {"text": "x", "sampling_params": {"temperature": -1}},
            400,
            {"error": {"message": "temperature must be non-negative, got -1.0."}},
        ),
    ],
)
def test_bad_bodies(
    emulator: EmulatorProcess, body: dict[str, Any], status: int, check: Any
) -> None:
    with client(emulator) as http:
        response = http.post("/generate", json=body)
    assert response.status_code == status
    if check == "contract":
        # A body of the wrong shape fails request validation: 0.5.23 answers with the
        # OpenAI-style envelope (seen on the real server: {"text": 5}).
        assert response.json()["object"] == "error"
    else:
        assert response.json() == check


def test_invalid_json_is_400(emulator: EmulatorProcess) -> None:
    with client(emulator) as http:
        response = http.post(
            "/generate", content=b"{not json", headers={"content-type": "application/json"}
        )
    assert response.status_code == 400
    body = response.json()
    assert body["object"] == "error" and body["code"] == 400


def test_max_new_tokens_zero(emulator: EmulatorProcess) -> None:
    out = generate(emulator, {"text": "x", "sampling_params": {"max_new_tokens": 0}})
    assert out["meta_info"]["completion_tokens"] == 0
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 0}
    assert json.dumps(out["output_ids"]) == "[]"


def test_requests_beyond_max_running_requests_queue(start_emulator: Any) -> None:
    emulator = start_emulator(
        "--max-running-requests", "1", "--enable-metrics", "--emulator-decode-ms", "10"
    )
    long_body = {"input_ids": [1], "sampling_params": {"max_new_tokens": 150, "ignore_eos": True}}
    short_body = {"input_ids": [2], "sampling_params": {"max_new_tokens": 1}}
    results: dict[str, Any] = {}

    def send(name: str, body: dict[str, Any]) -> None:
        with client(emulator) as http:
            results[name] = http.post("/generate", json=body).json()

    def gauge(http: Any, name: str) -> float:
        for line in http.get("/metrics").text.splitlines():
            if line.startswith(f"sglang:{name}{{"):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(name)

    def wait_for(http: Any, name: str, value: float) -> None:
        deadline = time.monotonic() + 10
        while gauge(http, name) != value:
            assert time.monotonic() < deadline, f"{name} never reached {value}"
            time.sleep(0.01)

    long_thread = threading.Thread(target=send, args=("long", long_body))
    short_thread = threading.Thread(target=send, args=("short", short_body))
    with client(emulator) as http:
        assert (
            http.get("/server_info").json()["internal_states"][0][
                "effective_max_running_requests_per_dp"
            ]
            == 1
        )
        long_thread.start()
        wait_for(http, "num_running_reqs", 1)
        short_thread.start()
        wait_for(http, "num_queue_reqs", 1)
        long_thread.join(30)
        short_thread.join(30)
    # The short request waited for the long one's slot.
    assert results["short"]["meta_info"]["e2e_latency"] > 0.2
    assert results["long"]["meta_info"]["completion_tokens"] == 150
