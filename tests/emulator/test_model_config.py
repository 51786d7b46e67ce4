"""The emulated model from a local model directory's config.json, and what a bad id does."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_sglang.emulator.config.cli import parse_args
from pytest_sglang.emulator.config.model import context_length_of, guess_profile
from pytest_sglang.emulator.engine.tokenizer import Tokenizer
from pytest_sglang.testing import EmulatorProcess
from tests.emulator.conftest import client

Start = Callable[..., EmulatorProcess]


def model_dir(tmp_path: Path, **config: Any) -> Path:
    path = tmp_path / "model"
    path.mkdir(exist_ok=True)
    base = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 1024,
            "max_position_embeddings": 4096, "eos_token_id": [7, 8], "hidden_size": 64,
            "num_hidden_layers": 2, "intermediate_size": 128}  # fmt: skip
    (path / "config.json").write_text(json.dumps({**base, **config}))
    return path


def test_a_local_config_json_is_read_as_sglang_reads_it(tmp_path: Path) -> None:
    path = model_dir(tmp_path)
    config = parse_args(["--model-path", str(path)])
    model = config.model
    assert (model.architecture, model.model_type) == ("Qwen2ForCausalLM", "qwen2")
    assert (model.vocab_size, model.context_length, model.eos_token_id) == (1024, 4096, 7)
    assert model.source == str(path / "config.json")
    assert config.server_args["context_length"] is None  # null, as the real server says
    assert config.context_length == 4096
    # Given flags win: --context-length and the emulator's own override.
    given = parse_args(["--model-path", str(path), "--context-length", "2048"])
    assert given.context_length == 2048
    overridden = parse_args(["--model-path", str(path), "--emulator-model-context-length", "8"])
    assert overridden.context_length == 8


def test_sglangs_context_length_rules() -> None:
    assert context_length_of({"max_position_embeddings": 4096}) == 4096
    assert context_length_of({"seq_length": 1000, "max_position_embeddings": 4096}) == 1000
    assert context_length_of({"max_position_embeddings": 4096,
                              "rope_scaling": {"factor": 4.0}}) == 16384  # fmt: skip
    llama3 = {"max_position_embeddings": 131072, "rope_scaling": {"factor": 8.0,
              "rope_type": "llama3"}}  # fmt: skip
    assert context_length_of(llama3) == 131072
    assert context_length_of({}) == 2048


def test_a_hub_id_is_guessed_from_its_name() -> None:
    model = guess_profile("meta-llama/Llama-3.1-8B-Instruct", None, None)
    assert (model.architecture, model.context_length, model.vocab_size) == (
        "LlamaForCausalLM",
        131072,
        128256,
    )
    assert model.source == "guessed from the model path"


def test_a_small_vocabulary_tokenizer_stays_inside_it() -> None:
    tokenizer = Tokenizer(1024, 2)
    ids = tokenizer.encode(" ".join(f"word{i}" for i in range(500)))
    ids += tokenizer.chat_prompt_ids(["hello there"]) + tokenizer.output_ids([1, 2], 0, 200)
    assert all(tokenizer.in_vocabulary(i) for i in ids)
    assert tokenizer.decode(tokenizer.output_ids([3], 0, 3)).count(" ") == 3


def test_model_endpoints_report_the_config(start_emulator: Start, tmp_path: Path) -> None:
    path = model_dir(tmp_path)
    emulator = start_emulator(model_path=str(path))
    with client(emulator) as http:
        card = http.get("/v1/models").json()["data"][0]
        info = http.get("/model_info").json()
        server = http.get("/server_info").json()
    assert card["max_model_len"] == 4096
    assert info["architectures"] == ["Qwen2ForCausalLM"] and info["model_type"] == "qwen2"
    assert server["context_length"] is None and server["max_req_input_len"] == 4090


def _wait_exit(emulator: EmulatorProcess, timeout: float = 30.0) -> int | None:
    deadline = time.monotonic() + timeout
    while emulator.process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return emulator.process.poll()


@pytest.mark.parametrize("stream", [False, True])
def test_an_id_outside_the_vocabulary_kills_the_server_as_on_sglang(
    start_emulator: Start, tmp_path: Path, stream: bool
) -> None:
    emulator = start_emulator(model_path=str(model_dir(tmp_path)))
    body = {"input_ids": [5, 1024], "stream": stream, "sampling_params": {"max_new_tokens": 2}}
    seen: dict[str, Any] = {}
    with pytest.raises(httpx.TransportError), client(emulator) as http:
        with http.stream("POST", "/generate", json=body) as response:
            seen["status"] = response.status_code
            seen["content_type"] = response.headers.get("content-type")
            seen["lines"] = list(response.iter_lines())
    if stream:
        # The streaming response has started: 200 and its headers, then not one event.
        assert seen["status"] == 200 and seen["content_type"].startswith("text/event-stream")
        assert "lines" not in seen or not any(line.startswith("data:") for line in seen["lines"])
    else:
        assert seen == {}  # no response at all
    assert _wait_exit(emulator) == -9
    log = emulator.log()
    assert "IndexError: index out of range in self" in log
    assert "Received sigquit from a child process" in log


def test_completions_prompt_ids_outside_the_vocabulary_kill_it_too(
    start_emulator: Start, tmp_path: Path
) -> None:
    emulator = start_emulator(model_path=str(model_dir(tmp_path)))
    body = {"model": "m", "prompt": [-1], "max_tokens": 2}
    with pytest.raises(httpx.TransportError), client(emulator) as http:
        http.post("/v1/completions", json=body)
    assert _wait_exit(emulator) == -9
