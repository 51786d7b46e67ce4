"""The bounded parse of a server's JSON body: size and depth limits, clear errors."""

from __future__ import annotations

import pytest

from pytest_sglang.loadgen import jsoncodec
from pytest_sglang.loadgen.jsoncodec import MAX_DEPTH, UnsafeBody, loads_body


def nested(depth: int) -> bytes:
    return b'{"a":' * (depth - 1) + b"[1]" + b"}" * (depth - 1)


def test_nesting_up_to_the_limit_is_parsed() -> None:
    value = loads_body(nested(MAX_DEPTH))
    for _ in range(MAX_DEPTH - 1):
        value = value["a"]
    assert value == [1]


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1025, 5000])
def test_deeper_nesting_is_refused_saying_so(depth: int) -> None:
    with pytest.raises(UnsafeBody, match=f"nested deeper than {MAX_DEPTH} levels"):
        loads_body(nested(depth))


def test_brackets_inside_strings_are_not_nesting() -> None:
    body = b'{"text": "' + b"[{" * 500 + b'", "ids": [[1], [2]]}'
    assert loads_body(body)["ids"] == [[1], [2]]


def test_a_body_over_the_size_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsoncodec, "MAX_BODY_BYTES", 10)
    with pytest.raises(UnsafeBody, match="a JSON body of 11 bytes, more than 10"):
        loads_body(b'"123456789"')
    assert loads_body(b'"12345678"') == "12345678"


def test_a_body_that_is_not_json_is_a_plain_value_error() -> None:
    with pytest.raises(ValueError) as caught:
        loads_body(b"<html>")
    assert not isinstance(caught.value, UnsafeBody)
