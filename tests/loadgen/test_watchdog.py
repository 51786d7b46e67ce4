"""The stall watchdog measures a stream's progress: its latest token, else its first event."""

from __future__ import annotations

import asyncio

from pytest_sglang.loadgen.records import RequestRecord
from pytest_sglang.loadgen.streams import StreamParser
from pytest_sglang.loadgen.watchdog import StallWatchdog

ROLE = b'data: {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}\n\n'
TOKEN = b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n'


def expiry(events: list[tuple[float, bytes]], now: float) -> str | None:
    """Feed ``events`` (time, bytes) to a chat stream's parser; return why it expired at ``now``.

    Its kind only: the words before the colon of the message.
    """

    async def scenario() -> str | None:
        dog = StallWatchdog(stall_timeout=1.0, first_token_timeout=100.0)
        record = RequestRecord(index=0, warmup=False, input_len=1, output_len=4)
        parser = StreamParser("chat", record)
        try:
            async with asyncio.timeout(None) as deadline:
                dog.watch(record, deadline, parser)
                for at, data in events:
                    parser.feed(data, at)
                dog.check(now)
                await asyncio.sleep(0.01)  # an expired deadline strikes on the next turn
        except TimeoutError:
            pass
        why = dog.expired(record)
        return None if why is None else why.split(":")[0]

    return asyncio.run(scenario())


def test_silent_after_a_role_chunk_is_a_stall() -> None:
    # Issue 24: it waited for the first-token timeout, or the request timeout.
    assert expiry([(10.0, ROLE)], now=10.5) is None
    assert expiry([(10.0, ROLE)], now=11.1) == "stalled"


def test_events_without_tokens_are_no_progress() -> None:
    heartbeats = [(10.0 + 0.3 * i, ROLE) for i in range(10)]
    assert expiry([(9.0, TOKEN), *heartbeats], now=10.1) == "stalled"


def test_a_token_restarts_the_clock() -> None:
    assert expiry([(10.0, ROLE), (10.8, TOKEN)], now=11.5) is None
    assert expiry([(10.0, ROLE), (10.8, TOKEN)], now=11.9) == "stalled"


def test_no_event_yet_is_the_first_token_rule() -> None:
    # Queued: only the run's silence (first_token_timeout, 100 s here) ends it.
    assert expiry([], now=50.0) is None
