"""Identity endpoints against the plugin's JSON Schemas, plus version surfaces (§1.3-1.5, §8)."""

from __future__ import annotations

import time
from collections.abc import Callable

from pytest_sglang.testing import EmulatorProcess
from tests.emulator.conftest import MODEL, client, schema_errors

Start = Callable[..., EmulatorProcess]


def test_v1_models_matches_schema_and_sglang(emulator: EmulatorProcess) -> None:
    with client(emulator) as http:
        before = int(time.time())
        response = http.get("/v1/models")
        after = int(time.time())
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert schema_errors("v1_models", body) == []
    card = body["data"][0]
    assert card == {
        "id": MODEL,
        "object": "model",
        "created": card["created"],
        "owned_by": "sglang",
        "root": MODEL,
        "parent": None,
        "max_model_len": 2048,
    }
    assert before <= card["created"] <= after  # the request time, not the start time


def test_served_model_name_and_default_context(start_emulator: Start) -> None:
    emulator = start_emulator("--served-model-name", "my-model")
    with client(emulator) as http:
        card = http.get("/v1/models").json()["data"][0]
        info = http.get("/model_info").json()
    assert (card["id"], card["root"], card["max_model_len"]) == ("my-model", "my-model", 131072)
    assert info["served_model_name"] == "my-model"
    assert info["model_path"] == MODEL


def test_single_model_card_and_unknown_model(emulator: EmulatorProcess) -> None:
    with client(emulator) as http:
        card = http.get(f"/v1/models/{MODEL}")
        missing = http.get("/v1/models/other")
    assert card.status_code == 200
    assert card.json()["id"] == MODEL
    assert missing.status_code == 404
    assert missing.json() == {
        "error": {
            "message": "The model 'other' does not exist",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
    }


def test_model_info_matches_schema(emulator: EmulatorProcess) -> None:
    with client(emulator) as http:
        body = http.get("/model_info").json()
    assert schema_errors("model_info", body) == []
    assert body["model_path"] == body["tokenizer_path"] == MODEL
    assert body["is_generation"] is True
    assert body["weight_version"] == "default"
    assert body["architectures"] == ["LlamaForCausalLM"]
    assert body["model_type"] == "llama"


def test_server_info_matches_schema_and_is_flat(emulator: EmulatorProcess) -> None:
    with client(emulator) as http:
        body = http.get("/server_info").json()
    assert schema_errors("server_info", body) == []
    assert body["version"] == "0.5.23"
    assert body["model_path"] == MODEL
    assert body["tp_size"] == 1
    assert body["context_length"] == 2048
    assert body["enable_metrics"] is True
    assert body["port"] == emulator.port
    assert body["status"] == "ready"
    assert body["max_req_input_len"] == 2048 - 6
    assert isinstance(body["max_total_num_tokens"], int)
    # 0.5.23: an object of phase timings (scheduler's, plus the tokenizer's end to end).
    assert set(body["startup_time"]) >= {"load_weight", "scheduler_e2e", "tokenizer_e2e"}
    assert body["frontend"] == "python"
    assert "--context-length 2048" in body["launch_command"]
    assert "cuda_graph_max_bs" not in body
    assert body["cuda_graph_max_bs_decode"] is None  # as given: the sizes are below
    assert body["cuda_graph_config"]["decode"]["max_bs"] == 256
    (state,) = body["internal_states"]
    assert state["tp_size"] == 1
    assert isinstance(state["last_gen_throughput"], float)
    assert set(state["memory_usage"]) >= {"weight", "kvcache", "token_capacity", "graph"}
    assert isinstance(state["memory_usage"]["graph"], dict)
    assert "avg_spec_accept_length" not in state
    assert state["effective_max_running_requests_per_dp"] >= 1


def test_unknown_flags_and_parallelism_reach_server_info(start_emulator: Start) -> None:
    emulator = start_emulator(
        "--tp",
        "8",
        "--dp",
        "2",
        "--my-custom-flag",
        "7",
        "--enable-thing",
        "--some-ratio",
        "0.5",
        "--some-name",
        "foo",
    )
    with client(emulator) as http:
        body = http.get("/server_info").json()
    assert schema_errors("server_info", body) == []
    assert (body["tp_size"], body["dp_size"]) == (8, 2)
    assert body["my_custom_flag"] == 7
    assert body["enable_thing"] is True
    assert body["some_ratio"] == 0.5
    assert body["some_name"] == "foo"
    assert len(body["internal_states"]) == 2


def test_eagle_defaults_to_48_running_requests(spec_emulator: EmulatorProcess) -> None:
    with client(spec_emulator) as http:
        body = http.get("/server_info").json()
    assert schema_errors("server_info", body) == []
    assert body["speculative_algorithm"] == "EAGLE3"
    assert body["max_running_requests"] == 48
    assert body["speculative_num_draft_tokens"] == 4
    assert body["internal_states"][0]["effective_max_running_requests_per_dp"] == 48
    assert "Max running requests is reset to 48 for speculative decoding" in spec_emulator.log()


def test_new_version_serves_old_names_with_a_deprecation_warning(
    emulator: EmulatorProcess,
) -> None:
    with client(emulator) as http:
        assert http.get("/get_model_info").json() == http.get("/model_info").json()
        old = http.get("/get_server_info").json()
    assert old["version"] == "0.5.23"
    log = emulator.log()
    assert "'/get_model_info' is deprecated" in log
    assert "'/get_server_info' is deprecated" in log


def test_old_version_surface(old_emulator: EmulatorProcess) -> None:
    with client(old_emulator) as http:
        for path in ("/model_info", "/server_info", "/ready", "/ping"):
            response = http.get(path)
            assert response.status_code == 404, path
            assert response.json() == {"detail": "Not Found"}
        models = http.get("/v1/models").json()
        info = http.get("/get_model_info").json()
        server = http.get("/get_server_info").json()
    assert schema_errors("v1_models", models) == []
    assert "parent" in models["data"][0]
    assert schema_errors("model_info", info) == []
    assert "architectures" not in info and "served_model_name" not in info
    assert schema_errors("server_info", server) == []
    assert server["version"] == "0.5.5"
    assert server["cuda_graph_max_bs"] == 48
    assert "cuda_graph_max_bs_decode" not in server
    assert "launch_command" not in server and "frontend" not in server
    assert server["max_running_requests"] == 48
    memory = server["internal_states"][0]["memory_usage"]
    assert isinstance(memory["graph"], float)
    assert "deprecated" not in old_emulator.log()


def test_flush_cache_and_ping(emulator: EmulatorProcess) -> None:
    with client(emulator) as http:
        for method in ("GET", "POST"):
            response = http.request(method, "/flush_cache")
            assert response.status_code == 200
            assert response.text.startswith("Cache flushed.\nPlease check backend logs")
        assert http.post("/flush_cache?timeout=5").status_code == 200
        assert http.get("/ping").status_code == 200
