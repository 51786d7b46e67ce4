"""Prompt token ids stay inside the served model's vocabulary.

A token id at or above the vocabulary size crashes a real SGLang server (the scheduler's
embedding lookup raises ``IndexError``, the whole server exits). The plugin's workloads draw
ids every tokenizer has (16-255) unless they know the vocabulary (``Workload(vocab_size=...)``,
``sglang_server.vocab_size``). Against the real tier with a 1024-token vocabulary: the plugin's
workloads on both token-id endpoints leave it running; one bad id kills it, and the emulator,
serving the same model directory, makes a client see the same thing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_sglang.loadgen.prompts import UNIVERSAL_TOKEN_IDS, token_id_range, token_ids
from pytest_sglang.loadgen.runner import LoadGenerator
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.server.handle import local_vocab_size
from tests.real import realserver
from tests.real.conftest import RealServers, unavailable
from tests.real.realserver import SETUP_COMMAND, ServerRun

# ------------------------------------------------------------------ without a server


@pytest.mark.parametrize("vocab", [None, 256, 1024, 32000, 128256])
def test_prompt_ids_never_leave_the_vocabulary(vocab: int | None) -> None:
    for endpoint in ("generate", "completions"):
        workload = Workload(input_len=512, output_len=1, endpoint=endpoint, vocab_size=vocab)
        ids = [i for n in range(20) for i in token_ids(workload, "s", n)]
        assert min(ids) >= 0
        assert max(ids) < (vocab or 256)


def test_ids_every_tokenizer_has() -> None:
    # Byte-level BPE keeps its 256 byte tokens at 0-255, SentencePiece byte fallback at 3-258;
    # the low ids where tokenizers keep BOS/EOS/UNK/PAD are left out.
    assert token_id_range(None) == UNIVERSAL_TOKEN_IDS == range(16, 256)
    assert token_id_range(1024) == range(16, 1024)
    assert token_id_range(32000) == range(1000, 30000)
    assert token_id_range(151936) == range(1000, 30000)


def test_vocab_size_is_part_of_the_workload() -> None:
    plain = Workload(input_len=4, output_len=1)
    sized = Workload(input_len=4, output_len=1, vocab_size=1024)
    assert "vocab_size" not in plain.as_dict()  # keys of existing workloads are unchanged
    assert sized.as_dict()["vocab_size"] == 1024 and sized.key() != plain.key()
    assert Workload.from_dict(sized.as_dict()) == sized
    with pytest.raises(ValueError, match="vocab_size"):
        Workload(input_len=4, output_len=1, vocab_size=0)


def test_vocab_size_is_learned_from_a_local_model_directory(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 1024}))
    assert local_vocab_size(str(tmp_path)) == 1024
    multimodal = tmp_path / "mm"
    multimodal.mkdir()
    (multimodal / "config.json").write_text(json.dumps({"text_config": {"vocab_size": 7}}))
    assert local_vocab_size(str(multimodal)) == 7
    assert local_vocab_size("meta-llama/Llama-3.1-8B-Instruct") is None  # a Hub id: unknown


# ------------------------------------------------------------------ the real tier


def _bad_id_seen_by_a_client(url: str, token_id: int) -> dict[str, Any]:
    """Send one streamed /generate with ``token_id``; what did the client get?"""
    seen: dict[str, Any] = {"status": None, "content_type": None, "events": 0, "done": False}
    body = {"input_ids": [token_id], "stream": True, "sampling_params": {"max_new_tokens": 2}}
    try:
        with (
            httpx.Client(base_url=url, timeout=60.0, trust_env=False) as client,
            client.stream("POST", "/generate", json=body) as response,
        ):
            seen["status"] = response.status_code
            seen["content_type"] = response.headers.get("content-type")
            for line in response.iter_lines():
                if line.startswith("data:"):
                    seen["events"] += 1
                    seen["done"] = seen["done"] or line.strip() == "data: [DONE]"
    except httpx.TransportError as exc:
        seen["cut"] = True
        seen["error"] = type(exc).__name__
    return seen


def _wait_exit(run: ServerRun, timeout: float = 120.0) -> int | None:
    deadline = time.monotonic() + timeout
    while run.process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    return run.process.poll()


@pytest.mark.timeout(900)
def test_small_vocabulary_server_survives_the_plugins_workloads(
    real_servers: RealServers, tmp_path: Path
) -> None:
    model = real_servers.tier.small_vocab_model
    if not (model / "config.json").is_file():
        unavailable(f"no vocabulary-1024 model at {model}; set it up with `{SETUP_COMMAND}`")
    with real_servers.exclusive():
        real = real_servers.start_own("real-vocab1024", model)
        try:
            info = realserver.get_json(real.url, "/server_info")
            learned = local_vocab_size(info["model_path"])
            assert learned == 1024
            generator = LoadGenerator(real.url, model="tiny", request_timeout=120)
            for endpoint in ("generate", "completions"):
                for vocab in (None, learned):  # ids every tokenizer has; the learned vocabulary
                    workload = Workload(input_len=48, output_len=4, requests=8, warmup=1,
                                        endpoint=endpoint, vocab_size=vocab)  # fmt: skip
                    run = generator.run_closed_loop(workload, 4)
                    assert all(r.ok for r in run.records), [r.error for r in run.records]
                    assert real.alive()
            # What the plugin no longer does: one id past the vocabulary kills the server.
            real_view = _bad_id_seen_by_a_client(real.url, 2000)
            real_exit = _wait_exit(real)
            real_log = real.log_path.read_text(errors="replace")
        finally:
            stopped = real.stop()
    assert not stopped.left, stopped  # the crashed server left no process behind
    port = realserver.free_port()
    emulator = realserver.start(
        "emulator", realserver.emulator_command(real.command, port), port, tmp_path
    )
    try:
        emu_view = _bad_id_seen_by_a_client(emulator.url, 2000)
        emu_exit = _wait_exit(emulator)
        emu_log = emulator.log_path.read_text(errors="replace")
    finally:
        emulator.stop()
    # The client sees 200 and the event-stream headers, then the connection closes with no
    # event (SGLang starts the streaming response before the scheduler reads the prompt).
    assert real_view["status"] == 200 and real_view["events"] == 0 and not real_view["done"]
    assert (real_exit, emu_exit) == (-9, -9)  # the server kills its tree and itself
    assert "IndexError: index out of range in self" in real_log
    assert "IndexError: index out of range in self" in emu_log
    for key in ("status", "content_type", "events", "done"):
        assert emu_view[key] == real_view[key], (key, real_view, emu_view)
