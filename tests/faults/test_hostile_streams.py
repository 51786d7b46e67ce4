"""A hostile stream: one 20 MB SSE line (issue 18: the decoder took 47 s, quadratic)."""

from __future__ import annotations

import time

from pytest_sglang.loadgen.streams import SSEDecoder

MB = 1024 * 1024


def decode(stream: bytes, piece: int) -> tuple[list[bytes], float]:
    decoder = SSEDecoder()
    events: list[bytes] = []
    started = time.perf_counter()
    for start in range(0, len(stream), piece):
        events += decoder.feed(stream[start : start + piece])
    events += decoder.close()
    return events, time.perf_counter() - started


def test_a_20_mb_line_in_small_reads_is_decoded_in_linear_time() -> None:
    line = b"x" * (20 * MB)
    events, seconds = decode(b"data: " + line + b"\n\n", 4096)
    assert events == [line]
    # Linear: well under a second here; the quadratic decoder took 24 s in 4 KB reads.
    assert seconds < 5.0, seconds


def test_many_data_lines_in_one_event_are_joined_once() -> None:
    stream = b"".join(b"data: %d\n" % i for i in range(200_000)) + b"\n"
    events, seconds = decode(stream, 4096)
    assert events == [b"\n".join(b"%d" % i for i in range(200_000))]
    assert seconds < 5.0, seconds


def test_an_unterminated_last_line_is_still_delivered() -> None:
    events, _ = decode(b"data: a\n\ndata: [DONE]", 3)
    assert events == [b"a", b"[DONE]"]
