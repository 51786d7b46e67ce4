"""The differential test: the same requests to the real SGLang 0.5.23 and to the emulator.

Three layers:

- live (the real tier): the shared real server and an emulator started with the same SGLang
  flags get every probe of :data:`~tests.real.differential.PROBES`; any difference in status,
  content type, key set, value type, stream chunk structure, metric names or startup phase
  order that the one allow-list (:data:`~tests.real.differential.ALLOWED`) does not cover
  fails the test;
- recorded (always): the same comparison against the recording of the real server
  (``recorded/sglang-0.5.23-cpu.json``, ``python -m tests.real.record``), with the emulator
  serving a model directory holding the tiny model's ``config.json``;
- planted (always, and live with a fault): the comparator catches a difference planted in an
  otherwise identical answer, of every kind it checks.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.real import differential as d
from tests.real import realserver
from tests.real.realserver import ServerRun

RECORDING = Path(__file__).resolve().parent / "recorded" / "sglang-0.5.23-cpu.json"
#: The tier's tiny model's config.json, as recorded (what the emulator reads).
TINY_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
}


def recording() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(RECORDING.read_text())
    return data


def recorded_observations() -> dict[str, d.Observation]:
    return {k: d.Observation.from_json(v) for k, v in recording()["observations"].items()}


def fail_on(diffs: list[d.Difference]) -> None:
    assert not diffs, "differences not in the allow-list:\n" + d.report(diffs)


# ------------------------------------------------------------------ the allow-list itself


def test_one_allow_list_of_at_most_ten_entries_each_with_a_reason() -> None:
    assert 1 <= len(d.ALLOWED) <= 10
    for entry in d.ALLOWED:
        assert len(entry.reason) > 40, entry
        # Never a blanket pass: a probe pattern, a path pattern and named kinds.
        assert entry.kinds and entry.paths != "*"


def test_every_probe_was_recorded() -> None:
    assert set(recording()["observations"]) == {p.name for p in d.PROBES}


# ------------------------------------------------------------------ planted differences


def _unexplained_after(mutate: Callable[[dict[str, d.Observation]], None]) -> list[d.Difference]:
    real = recorded_observations()
    emu = copy.deepcopy(real)
    assert d.unexplained(d.compare(real, emu)) == []
    mutate(emu)
    return d.unexplained(d.compare(real, emu))


def _set_status(obs: dict[str, d.Observation]) -> None:
    obs["unknown path"].status = 200


def _set_content_type(obs: dict[str, d.Observation]) -> None:
    obs["flush_cache"].content_type = "text/plain;charset=utf-8"


def _drop_meta_key(obs: dict[str, d.Observation]) -> None:
    del obs["generate ids"].body["meta_info"]["queue_time"]


def _add_key(obs: dict[str, d.Observation]) -> None:
    obs["models"].body["data"][0]["context_window"] = 4096


def _change_type(obs: dict[str, d.Observation]) -> None:
    obs["models"].body["data"][0]["max_model_len"] = "4096"


def _resolve_null(obs: dict[str, d.Observation]) -> None:
    # The emulator's old habit: a resolved number where the real server says null.
    obs["server_info"].body["max_running_requests"] = 2048


def _drop_client_key(obs: dict[str, d.Observation]) -> None:
    del obs["server_info"].body["internal_states"][0]["effective_max_running_requests_per_dp"]


def _drop_usage_chunk(obs: dict[str, d.Observation]) -> None:
    events = obs["chat stream usage"].body
    usage_chunk = [e for e in events if isinstance(e, dict) and e.get("choices") == []]
    obs["chat stream usage"].body = [e for e in events if e not in usage_chunk]


def _drop_done(obs: dict[str, d.Observation]) -> None:
    obs["generate text stream"].body = obs["generate text stream"].body[:-1]


def _drop_metric(obs: dict[str, d.Observation]) -> None:
    del obs["metrics"].body["sglang:queue_time_seconds"]


def _stream_an_error(obs: dict[str, d.Observation]) -> None:
    obs["completions over context stream"] = d.Observation(
        200, "text/event-stream;charset=utf-8", "sse", [{"error": {"message": "x"}}, "[DONE]"]
    )


def _change_value(obs: dict[str, d.Observation]) -> None:
    obs["models"].body["data"][0]["max_model_len"] = 131072


@pytest.mark.parametrize(
    ("mutate", "kind"),
    [
        (_set_status, "status"),
        (_set_content_type, "content-type"),
        (_drop_meta_key, "only-real"),
        (_add_key, "only-emulator"),
        (_change_type, "type"),
        (_resolve_null, "type"),
        (_drop_client_key, "only-real"),
        (_drop_usage_chunk, "stream"),
        (_drop_done, "stream"),
        (_drop_metric, "metric-only-real"),
        (_stream_an_error, "status"),
        (_change_value, "value"),
    ],
)
def test_a_planted_difference_is_caught(
    mutate: Callable[[dict[str, d.Observation]], None], kind: str
) -> None:
    found = _unexplained_after(mutate)
    assert kind in {diff.kind for diff in found}, d.report(found)


def test_a_planted_startup_difference_is_caught() -> None:
    real = recording()["startup"]
    assert real == ["closed", "warming", "ready"]
    assert d.compare_startup(real, real) == []
    (diff,) = d.compare_startup(real, ["closed", "ready"])  # no warm-up phase
    assert diff.kind == "phase-order"


def test_allowed_differences_are_allowed_but_not_on_client_keys() -> None:
    # A ServerArgs field the emulator does not model: allowed, with its reason.
    only_real = d.Difference("server_info", "$.enable_lmcache", "only-real", "bool")
    assert d.unexplained([only_real]) == []
    # A key clients read: never.
    for key in ("context_length", "max_running_requests", "tp_size", "speculative_algorithm"):
        missing = d.Difference("server_info", f"$.{key}", "only-real", "null")
        assert d.unexplained([missing]) == [missing]


# ------------------------------------------------------------------ the emulator vs the recording


@pytest.fixture
def tiny_model_dir(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY_CONFIG))
    return model


def _emulator_like_recording(model: Path, log_dir: Path, *extra: str) -> ServerRun:
    command = [str(c).replace("MODEL_DIR", str(model)) for c in recording()["command"]]
    port = realserver.free_port()
    return realserver.start(
        "emulator", realserver.emulator_command(command, port, *extra), port, log_dir
    )


@pytest.mark.timeout(300)
def test_emulator_matches_the_recorded_real_server(tiny_model_dir: Path, tmp_path: Path) -> None:
    emulator = _emulator_like_recording(tiny_model_dir, tmp_path)
    try:
        seen = d.observe(emulator.url)
    finally:
        emulator.stop()
    diffs = d.compare(recorded_observations(), seen)
    diffs += d.compare_startup(recording()["startup"], emulator.startup.phase_order())
    fail_on(d.unexplained(diffs))


# ------------------------------------------------------------------ live


@pytest.mark.timeout(900)
def test_real_server_and_emulator_agree(real_server: ServerRun, tmp_path: Path) -> None:
    real = d.observe(real_server.url)
    port = realserver.free_port()
    emulator = realserver.start(
        "emulator", realserver.emulator_command(real_server.command, port), port, tmp_path
    )
    try:
        emu = d.observe(emulator.url)
    finally:
        emulator.stop()
    diffs = d.compare(real, emu)
    diffs += d.compare_startup(real_server.startup.phase_order(), emulator.startup.phase_order())
    assert real_server.startup.phase_order() == ["closed", "warming", "ready"], (
        real_server.startup.describe()
    )
    assert not real_server.startup.unexpected(), real_server.startup.describe()
    assert not emulator.startup.unexpected(), emulator.startup.describe()
    fail_on(d.unexplained(diffs))
    # Every allow-list entry is still needed (a stale entry would hide a future difference).
    for entry in d.ALLOWED:
        assert any(entry.allows(diff) for diff in diffs), f"unused allow-list entry: {entry}"


@pytest.mark.timeout(600)
def test_a_planted_emulator_fault_is_caught_live(real_server: ServerRun, tmp_path: Path) -> None:
    real = d.observe(real_server.url, [p for p in d.PROBES if p.name in ("models", "model card")])
    port = realserver.free_port()
    emulator = realserver.start(
        "emulator",
        realserver.emulator_command(
            real_server.command, port, "--emulator-fault", "malformed-models"
        ),
        port,
        tmp_path,
    )
    try:
        emu = d.observe(emulator.url, [p for p in d.PROBES if p.name in ("models", "model card")])
    finally:
        emulator.stop()
    found = d.unexplained(d.compare(real, emu))
    assert {(f.probe, f.kind) for f in found} >= {("models", "only-real"), ("models", "type")}
