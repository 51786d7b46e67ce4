"""Failure modes on a raw socket: stalled, trickling and cut streams become failed records.

A tiny asyncio HTTP server in the test's own event loop plays the misbehaving SGLang, so
each fault is exact and needs no emulator support.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable

from pytest_sglang.loadgen.records import LoadRun
from pytest_sglang.loadgen.runner import LoadGenerator
from pytest_sglang.loadgen.schedule import ClosedLoop
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.measurement import measure

Behaviour = Callable[[asyncio.StreamWriter], Awaitable[None]]

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def http_chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def native_event(tokens: int, final: bool = False) -> bytes:
    meta = {
        "completion_tokens": tokens,
        "prompt_tokens": 4,
        "finish_reason": {"type": "length", "length": tokens} if final else None,
    }
    body = {"text": "x" * tokens, "output_ids": list(range(tokens)), "meta_info": meta}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def serve(behaviour: Behaviour, run: Callable[[str], Awaitable[LoadRun]]) -> LoadRun:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            await behaviour(writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            # A stalled handler is still sleeping when the run ends and asyncio.run cancels
            # it; ending quietly keeps asyncio from logging the cancellation as an error.
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        return await run(f"http://127.0.0.1:{port}")
    finally:
        server.close()


async def stall_after_first_token(writer: asyncio.StreamWriter) -> None:
    writer.write(HEAD + http_chunk(native_event(1)))
    await writer.drain()
    await asyncio.sleep(3600)


async def trickle(writer: asyncio.StreamWriter) -> None:
    writer.write(HEAD)
    for tokens in range(1, 10_000):
        writer.write(http_chunk(native_event(tokens)))
        await writer.drain()
        await asyncio.sleep(0.05)


async def cut_mid_stream(writer: asyncio.StreamWriter) -> None:
    writer.write(HEAD + http_chunk(native_event(1)))
    await writer.drain()
    writer.transport.abort()  # no final chunk, no [DONE]: the connection just drops


async def close_without_done(writer: asyncio.StreamWriter) -> None:
    # A well-formed HTTP body that simply lacks the final event and [DONE].
    writer.write(HEAD + http_chunk(native_event(1)) + b"0\r\n\r\n")
    await writer.drain()


WORKLOAD = Workload(input_len=4, output_len=8, requests=3, warmup=0)


def run_against(behaviour: Behaviour, **options: float) -> tuple[LoadRun, float]:
    async def run(url: str) -> LoadRun:
        generator = LoadGenerator(url, **options)  # type: ignore[arg-type]
        return await generator.run(WORKLOAD, ClosedLoop(3))

    started = time.perf_counter()
    result = asyncio.run(serve(behaviour, run))
    return result, time.perf_counter() - started


def test_a_stalled_stream_ends_at_the_request_timeout() -> None:
    run, elapsed = run_against(stall_after_first_token, request_timeout=2.0)
    assert elapsed < 30  # bounded: the server would stall for an hour
    assert len(run.records) == 3
    for record in run.records:
        assert record.status == 200
        assert record.error is not None and record.error.startswith("timed out")
        assert "1 token chunks had arrived" in record.error
        assert record.chunk_tokens == [1]  # what arrived is kept
        # The request ends at the timeout, not at its first token. The deadline runs from
        # when the request's task enters it, before the run's client is built and the send
        # (0.4 s of it on a machine at load 8): half the timeout leaves room for that.
        assert record.end is not None and record.chunk_times
        assert record.end - record.chunk_times[0] > 1.0
    assert measure(run).failed == 3


def test_a_trickling_stream_ends_at_the_request_timeout() -> None:
    run, elapsed = run_against(trickle, request_timeout=0.5)
    assert elapsed < 30
    assert all(r.error and r.error.startswith("timed out") for r in run.records)
    assert all(len(r.chunk_tokens) > 1 for r in run.records)


def test_stall_timeout_ends_a_stream_silent_after_its_first_token() -> None:
    run, elapsed = run_against(stall_after_first_token, request_timeout=60, stall_timeout=0.3)
    assert elapsed < 30  # the request timeout alone would have taken a minute
    for record in run.records:
        assert record.error is not None
        assert record.error.startswith("stalled: no new token for 0.3 s after 1 token chunks")
        assert record.chunk_tokens == [1]
        # Noticed within a check interval (a quarter of the timeout) of the stall.
        assert record.end is not None and 0.3 <= record.end - record.chunk_times[0] < 2.0


async def queue_then_stream(writer: asyncio.StreamWriter) -> None:
    # Headers at once, then a first token only after a long "queue": not a stall.
    writer.write(HEAD)
    await writer.drain()
    await asyncio.sleep(0.8)
    for tokens in range(1, 9):
        writer.write(http_chunk(native_event(tokens, final=tokens == 8)))
    writer.write(http_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    await writer.drain()


def test_the_wait_for_the_first_token_is_not_a_stall() -> None:
    run, _ = run_against(queue_then_stream, request_timeout=60, stall_timeout=0.3)
    assert [record.error for record in run.records] == [None, None, None]
    assert all(record.ttft is not None and record.ttft > 0.7 for record in run.records)


def test_a_trickle_faster_than_the_stall_timeout_is_not_a_stall() -> None:
    run, _ = run_against(trickle, request_timeout=0.8, stall_timeout=0.3)
    # 50 ms between tokens never trips a 0.3 s stall timeout; the request timeout ends it.
    assert all(r.error and r.error.startswith("timed out") for r in run.records)


def test_a_dropped_connection_is_a_failed_record() -> None:
    run, _ = run_against(cut_mid_stream, request_timeout=10)
    assert len(run.records) == 3
    for record in run.records:
        assert record.error is not None
        assert record.chunk_tokens == [1]


def test_a_stream_without_done_is_a_failed_record() -> None:
    run, _ = run_against(close_without_done, request_timeout=10)
    for record in run.records:
        assert record.error == "stream ended before 'data: [DONE]' after 1 events"
