from __future__ import annotations

import json
import pickle
from typing import Any

import pytest

from pytest_sglang.loadgen.workload import DEFAULT_WARMUP_CAP, Workload


def test_defaults() -> None:
    w = Workload(input_len=1024, output_len=256)
    assert (w.requests, w.endpoint, w.warmup, w.seed, w.temperature, w.stream) == (
        64,
        "generate",
        None,
        0,
        0.0,
        True,
    )
    assert dict(w.extra) == {}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"input_len": 0}, "Workload.input_len must be an integer >= 1, got 0"),
        ({"output_len": 2.5}, "Workload.output_len must be an integer >= 1"),
        ({"requests": True}, "Workload.requests must be an integer >= 1"),
        ({"endpoint": "embeddings"}, "Workload.endpoint must be one of 'generate'"),
        ({"warmup": -1}, "Workload.warmup must be None (automatic) or an integer >= 0"),
        ({"seed": "1"}, "Workload.seed must be an integer"),
        ({"temperature": -0.1}, "Workload.temperature must be a finite number >= 0"),
        ({"temperature": float("nan")}, "Workload.temperature must be a finite number >= 0"),
        ({"stream": 1}, "Workload.stream must be True or False"),
        ({"extra": [1]}, "Workload.extra must be a mapping"),
        ({"extra": {"x": object()}}, "Workload.extra must hold JSON values only"),
        ({"extra": {"max_tokens": 5}}, "Workload.extra must not set max_tokens"),
        ({"extra": {"sampling_params": {"ignore_eos": False}}}, "must not set ignore_eos"),
        ({"extra": {"sampling_params": 3}}, "extra['sampling_params'] must be a mapping"),
    ],
)
def test_invalid_values_say_what_and_how(kwargs: dict[str, Any], message: str) -> None:
    base: dict[str, Any] = {"input_len": 8, "output_len": 8}
    with pytest.raises(ValueError) as info:
        Workload(**{**base, **kwargs})
    assert message in str(info.value)


def test_warmup_defaults_to_one_per_slot_capped() -> None:
    w = Workload(input_len=8, output_len=8)
    assert [w.warmup_for(c) for c in (1, 5, 8, 250)] == [1, 5, 8, DEFAULT_WARMUP_CAP]
    assert Workload(input_len=8, output_len=8, warmup=0).warmup_for(64) == 0
    assert Workload(input_len=8, output_len=8, warmup=20).warmup_for(1) == 20


def test_key_is_stable_and_distinguishes_workloads() -> None:
    a = Workload(input_len=8, output_len=8, extra={"top_k": 1, "a": [1, {"b": 2}]})
    b = Workload(input_len=8, output_len=8, extra={"a": [1, {"b": 2}], "top_k": 1})
    assert a == b and hash(a) == hash(b) and a.key() == b.key()
    assert a.key() == (
        '{"endpoint":"generate","extra":{"a":[1,{"b":2}],"top_k":1},"input_len":8,'
        '"output_len":8,"requests":64,"seed":0,"stream":true,"temperature":0.0,"warmup":null}'
    )
    assert Workload(input_len=8, output_len=9).key() != Workload(input_len=8, output_len=8).key()
    assert len({a, b, Workload(input_len=8, output_len=8, seed=1)}) == 2


def test_as_dict_round_trips_through_json() -> None:
    w = Workload(
        input_len=8,
        output_len=4,
        requests=3,
        endpoint="chat",
        warmup=2,
        seed=7,
        temperature=0.5,
        extra={"top_p": 0.9},
        stream=False,
    )
    data = json.loads(json.dumps(w.as_dict()))
    assert Workload.from_dict(data) == w


def test_extra_is_a_private_frozen_copy() -> None:
    extra = {"top_k": 1}
    w = Workload(input_len=8, output_len=8, extra=extra)
    extra["top_k"] = 2
    assert w.extra["top_k"] == 1
    with pytest.raises(TypeError):
        w.extra["top_k"] = 3  # type: ignore[index]


def test_a_workload_pickles_for_the_load_workers() -> None:
    # Worker processes and Ray actors receive the workload (and return it in their runs) by
    # pickle; its read-only ``extra`` must not stop that.
    w = Workload(input_len=8, output_len=4, requests=3, extra={"top_p": 0.9}, turns=None)
    copy = pickle.loads(pickle.dumps(w))
    assert copy == w and copy.extra["top_p"] == 0.9
