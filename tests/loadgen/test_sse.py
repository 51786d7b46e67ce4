from __future__ import annotations

import pytest

from pytest_sglang.loadgen.streams import SSEDecoder

STREAM = (
    b'data: {"a":1}\n\n'
    b": a comment line\n"
    b"event: ignored\n"
    b'data: {"b":2}\r\n\r\n'
    b"data:no-space\n\n"
    b"data: first\ndata: second\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [b'{"a":1}', b'{"b":2}', b"no-space", b"first\nsecond", b"[DONE]"]


def decode_in_pieces(stream: bytes, cuts: list[int]) -> list[bytes]:
    decoder = SSEDecoder()
    events: list[bytes] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        events += decoder.feed(stream[start:cut])
        start = cut
    return events + decoder.close()


def test_whole_stream_in_one_read() -> None:
    assert decode_in_pieces(STREAM, []) == EXPECTED


@pytest.mark.parametrize("cut", range(1, len(STREAM)))
def test_a_read_boundary_anywhere_changes_nothing(cut: int) -> None:
    # Network reads split events inside "data:", inside the JSON, between \r and \n...
    assert decode_in_pieces(STREAM, [cut]) == EXPECTED


def test_one_byte_per_read() -> None:
    assert decode_in_pieces(STREAM, list(range(1, len(STREAM)))) == EXPECTED


def test_an_event_completes_only_at_its_blank_line() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: x\n") == []
    assert decoder.feed(b"\n") == [b"x"]


def test_close_returns_a_last_event_without_its_newlines() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: [DONE]") == []
    assert decoder.close() == [b"[DONE]"]
    assert decoder.close() == []


def test_blank_lines_without_data_make_no_event() -> None:
    assert decode_in_pieces(b"\n\n\r\n: keep-alive\n\n", []) == []
