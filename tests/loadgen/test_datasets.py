"""Dataset files given by path: JSONL prompts and messages, ShareGPT, errors, sampling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_sglang.loadgen.datasets import DatasetError, estimate_tokens, load_dataset
from pytest_sglang.loadgen.prompts import request_body
from pytest_sglang.loadgen.runner import LoadGenerator
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.measurement import measure
from pytest_sglang.testing import running_emulator

SHAREGPT = [
    {"id": "a", "conversations": [
        {"from": "human", "value": "What is the capital of France?"},
        {"from": "gpt", "value": "Paris is the capital of France, on the river Seine."},
        {"from": "human", "value": "And of Italy?"},
        {"from": "gpt", "value": "Rome."},
    ]},
    {"id": "too-short", "conversations": [{"from": "human", "value": "hi"}]},
    {"id": "b", "conversations": [
        {"from": "system", "value": "Be brief."},
        {"from": "human", "value": "Name a colour."},
        {"from": "gpt", "value": "Blue."},
    ]},
]  # fmt: skip


def write(tmp_path: Path, name: str, lines: list[object]) -> str:
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return str(path)


def test_sharegpt_is_read_as_bench_serving_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(SHAREGPT))
    entries = load_dataset(str(path))
    # The one-message conversation is left out; the system message is kept apart.
    assert [e.origin.rsplit(" ", 1)[-1] for e in entries] == ["1", "3"]
    first = entries[0]
    assert [t.user for t in first.turns] == ["What is the capital of France?", "And of Italy?"]
    answer = "Paris is the capital of France, on the river Seine."
    assert first.turns[0].output_estimate() == estimate_tokens(answer) == 13
    # A single-turn request sends the first human message (with the system message).
    assert entries[1].messages(entries[1].single) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Name a colour."},
    ]
    workload = Workload(input_len=100, output_len=32, requests=6, endpoint="chat",
                        dataset=str(path), answer_lengths=True)  # fmt: skip
    # Drawn without replacement: every eligible entry once before any repeats.
    firsts = {request_body(workload, "run", i)["messages"][-1]["content"] for i in range(2)}
    assert firsts == {"What is the capital of France?", "Name a colour."}
    lengths = {workload.lengths("run", i)[1] for i in range(2)}
    assert lengths == {estimate_tokens("Blue."), 13}
    assert workload.lengths("run", 0) == workload.lengths("run", 0)  # seeded


def test_jsonl_prompts_and_messages_on_each_endpoint(tmp_path: Path) -> None:
    prompts = write(tmp_path, "p.jsonl", [{"prompt": "one two three"}, {"text": "four five"},
                                          {"prompt": "six", "output_len": 3}])  # fmt: skip
    generate = Workload(input_len=50, output_len=8, dataset=prompts, answer_lengths=True)
    bodies = [request_body(generate, "r", i) for i in range(3)]
    assert {b["text"] for b in bodies} == {"one two three", "four five", "six"}
    assert all("input_ids" not in b for b in bodies)
    assert sorted(b["sampling_params"]["max_new_tokens"] for b in bodies) == [3, 8, 8]
    completions = Workload(input_len=50, output_len=8, endpoint="completions", dataset=prompts)
    assert isinstance(request_body(completions, "r", 0)["prompt"], str)
    messages = write(tmp_path, "m.jsonl", [{"messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Bye"}]}])  # fmt: skip
    chat = Workload(input_len=50, output_len=8, endpoint="chat", dataset=messages)
    # Messages are sent as given.
    assert [m["content"] for m in request_body(chat, "r", 0)["messages"]] == [
        "You are terse.", "Hi", "Hello.", "Bye"]  # fmt: skip
    with pytest.raises(
        DatasetError, match=r"m.jsonl:1: chat messages .* Workload\(endpoint=.chat.\)"
    ):
        Workload(input_len=50, output_len=8, dataset=messages)


def test_the_key_follows_the_file_content(tmp_path: Path) -> None:
    a = write(tmp_path, "a.jsonl", [{"prompt": "x"}])
    b = write(tmp_path, "b.jsonl", [{"prompt": "y"}])
    wa, wb = (Workload(input_len=8, output_len=4, dataset=p) for p in (a, b))
    assert wa.key() != wb.key() and "dataset_sha256" in wa.key()
    assert hash(wa) == hash(Workload(input_len=8, output_len=4, dataset=a))
    assert Workload.from_dict(wa.as_dict()) == wa


def test_input_len_leaves_out_longer_prompts(tmp_path: Path) -> None:
    path = write(tmp_path, "p.jsonl", [{"prompt": "x" * 400}, {"prompt": "short"}])
    workload = Workload(input_len=50, output_len=4, dataset=path)
    assert {request_body(workload, "r", i)["text"] for i in range(4)} == {"short"}
    with pytest.raises(DatasetError, match=r"none of its 2 entries can be sent .* raise input_len"):
        Workload(input_len=1, output_len=4, dataset=path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"prompt": "ok"}\n{"prompt": "broken"\n',
         r"bad\.jsonl:2: not valid JSON .*\(JSON Lines\)"),
        ('{"question": "?"}\n', r"bad\.jsonl:1: an object with keys \['question'\], none of"),
        ('{"prompt": 5}\n', r"bad\.jsonl:1: 'prompt' is int 5, not text"),
        ('{"prompt": "a", "output_len": 0}\n', r"bad\.jsonl:1: output_len is 0; give"),
        ('{"messages": [{"role": "user", "content": "a"}, '
         '{"role": "assistant", "content": "b"}]}\n',
         r"bad\.jsonl:1: the last message is the assistant's; end with the user message"),
        ('{"messages": [{"role": "tool", "content": "a"}]}\n', r"message 1 has role 'tool'"),
        ('{"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}\n',
         r"bad\.jsonl:1: two user messages in a row; alternate user and assistant"),
        ('{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}\n',
         r"message 1's content is list .*\(images and other content parts are not supported"),
        ('[{"conversations": [{"from": "robot", "value": "a"}]}]',
         r"bad\.jsonl: item 1: message 1 is from 'robot'"),
        ("\n\n", r"holds no usable entry \(0 objects read\)"),
    ],
)  # fmt: skip
def test_bad_files_name_the_line_and_the_fix(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(DatasetError, match=message):
        Workload(input_len=100, output_len=4, endpoint="chat", dataset=str(path))


def test_a_missing_file_and_bad_combinations() -> None:
    with pytest.raises(
        DatasetError, match=r"'/nonexistent.jsonl' cannot be read: .* never downloaded"
    ):
        Workload(input_len=8, output_len=4, dataset="/nonexistent.jsonl")
    with pytest.raises(ValueError, match="answer_lengths takes the lengths from a dataset"):
        Workload(input_len=8, output_len=4, answer_lengths=True)


@pytest.mark.slow
def test_a_dataset_run_records_the_servers_prompt_tokens(tmp_path: Path) -> None:
    """Against the emulator: each record keeps the server's prompt_tokens for its text."""
    texts = [" ".join(["word"] * n) for n in (3, 7, 12, 20, 31)]
    path = write(tmp_path, "prompts.jsonl", [{"prompt": t} for t in texts])
    workload = Workload(input_len=1000, output_len=6, requests=10, warmup=0,
                        endpoint="completions", dataset=path)  # fmt: skip
    with running_emulator(tmp_path) as emulator:
        run = measure(LoadGenerator(emulator.url).run_closed_loop(workload, 2))
    assert run.failed == 0 and run.completed == 10
    # The emulator counts one token a word: the server's count is each text's word count.
    counts = sorted(r.prompt_tokens or 0 for r in run.records)
    assert counts == sorted([3, 7, 12, 20, 31] * 2)
    assert run.input_tokens == 2 * sum((3, 7, 12, 20, 31))
    assert run.check("output_length").passed is True
    check = run.check("input_length")
    assert check.passed is None and "server counted 14.6 prompt tokens" in check.detail


def test_the_summary_names_the_dataset_and_the_turns(tmp_path: Path) -> None:
    from pytest_sglang.report.summary import describe_workload

    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(SHAREGPT))
    workload = Workload(input_len=100, output_len=8, endpoint="chat", turns=2,
                        dataset=str(path))  # fmt: skip
    text = describe_workload(workload.as_dict())
    assert text.endswith(", dataset sharegpt.json, 2-turn sessions")


def test_a_stored_dataset_workload_rebuilds_without_its_file(tmp_path: Path) -> None:
    path = write(tmp_path, "gone.jsonl", [{"prompt": "x"}])
    workload = Workload(input_len=8, output_len=4, dataset=path)
    Path(path).unlink()
    # A report or baseline written elsewhere: rebuilt as it ran, the file not read.
    assert Workload.from_dict(workload.as_dict()).as_dict() == workload.as_dict()
    with pytest.raises(DatasetError, match=r"other\.jsonl' cannot be read"):
        Workload(input_len=8, output_len=4, dataset=str(tmp_path / "other.jsonl"))
