"""Benchmark: the load generator's throughput and TTFT against the emulator's ground truth.

The emulator knows when each request arrived (the kernel's receive time of its first
segment), when its HTTP layer and its engine got it, and when each chunk was emitted and
written to the socket (``--emulator-trace``, see ``pytest_sglang.emulator.engine.trace``). This
runs the load generator (``LoadGenerator``, ``measure``) closed-loop against a batch-engine
emulator and compares, over the same measured requests:

- output throughput: the load generator's ``output tokens / (last response end - first
  request sent)`` against the server's ``output tokens / (last token emitted - first request
  arrived)``; target: within 1 %;
- p50 TTFT: the load generator's ``first chunk parsed - request sent`` (``sent``: aiohttp
  handed the request's bytes to the socket) against the server's ``first chunk written to the
  socket - request arrived`` (and, for reference, the engine's ``first chunk emitted -
  request reached the engine``); target: within 2 ms.

Levels: an idle floor (C=1), the baseline at C=64 (every request of a wave starts and ends
in the same forward, so 64 responses end and 64 requests arrive at once) and EAGLE3 at C=64
(random accepted lengths spread the completions out: after the initial burst of 64, requests
arrive one at a time; "steady" leaves that burst out of the TTFT figures).

What is left between the two: the way in (the client's stamp to the socket write, then
loopback to the kernel's receive stamp: microseconds) and the way out (the server's socket
write to the client's parse: loopback, plus the client's event loop when it is busy with
other requests). Everything the server does after the request arrived, including the time
the request waits in the socket before the server's event loop reads it (tens of
milliseconds in the baseline's bursts), is server time on both sides. To show where a
request's time goes, the benchmark also records, in its own process, when each request's
bytes were written to the socket (a wrapper around asyncio's socket transport ``write``: a
diagnostic, this process only), and prints the median of every stage.

Clocks: the trace's wall-clock times are converted back to the monotonic clock with its clock
line; on Linux ``time.perf_counter()`` (the load generator's clock) and ``time.monotonic()``
(the emulator's) read the same system-wide ``CLOCK_MONOTONIC``, so the two processes'
timestamps compare exactly.

    python benchmarks/loadgen_accuracy.py [--concurrency 64] [--requests 128]
        [--speedup 2] [--output-len 256]
"""

from __future__ import annotations

import argparse
import asyncio.selector_events
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_sglang.emulator.engine.trace import read_trace
from pytest_sglang.loadgen import LoadGenerator, LoadRun
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.measurement import Measurement, measure
from pytest_sglang.testing import EAGLE3_FLAGS, running_emulator

INPUT_LEN = 32
THROUGHPUT_TARGET = 0.01
TTFT_TARGET = 0.002

# -- client-side wire times (diagnostic, this process only) ---------------------------------

#: (perf_counter, local port) of every HTTP request this process wrote to a socket.
WIRE: list[tuple[float, int]] = []
_Transport: Any = getattr(asyncio.selector_events, "_SelectorSocketTransport")  # noqa: B009
_original_write: Callable[..., None] = _Transport.write


def _recording_write(self: Any, data: Any) -> None:
    if bytes(data[:5]) == b"POST ":
        WIRE.append((time.perf_counter(), int(self._sock.getsockname()[1])))
    _original_write(self, data)


_Transport.write = _recording_write


@dataclass(frozen=True)
class Level:
    """One compared level: its figures and the medians of every stage (seconds)."""

    label: str
    client_tput: float
    server_tput: float
    client_ttft: float
    server_ttft: float
    engine_ttft: float
    client_window: float
    server_window: float
    stages: dict[str, float]
    max_lag_ms: float

    @property
    def tput_error(self) -> float:
        """Relative throughput error of the load generator."""
        return self.client_tput / self.server_tput - 1

    @property
    def ttft_error(self) -> float:
        """p50 TTFT difference (client - server), seconds."""
        return self.client_ttft - self.server_ttft


def same_clock() -> bool:
    """Whether ``perf_counter`` and ``monotonic`` are the same clock (Linux: CLOCK_MONOTONIC)."""
    perf = time.get_clock_info("perf_counter").implementation
    mono = time.get_clock_info("monotonic").implementation
    return perf == mono


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def server_lines(trace: Path, run: LoadRun) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The trace lines of ``run``'s measured requests, times on the client's clock."""
    clock, requests, summary = read_trace(trace)
    if not same_clock():  # pragma: no cover - only Linux is supported here
        raise SystemExit("perf_counter and monotonic differ on this platform")
    shift = clock["monotonic"] - clock["wall"]
    start = min(r.sent for r in run.measured)
    lines = []
    for line in requests:
        if line["http_received"] is None or not line["t"] or line["prompt_tokens"] != INPUT_LEN:
            continue
        if line["arrived"] is None:  # pragma: no cover - only Linux is supported here
            raise SystemExit("the emulator's trace has no kernel receive times (Linux only)")
        line = dict(
            line,
            arrived=line["arrived"] + shift,
            http_received=line["http_received"] + shift,
            received=line["received"] + shift,
            first_write=line["first_write"] + shift,
            t=[t + shift for t in line["t"]],
        )
        if line["arrived"] >= start - 0.05:
            lines.append(line)
    lines.sort(key=lambda line: line["arrived"])
    if len(lines) != len(run.measured):
        raise SystemExit(f"{len(lines)} trace lines for {len(run.measured)} measured requests")
    return lines, summary


def compare(
    label: str,
    m: Measurement,
    run: LoadRun,
    lines: Sequence[dict[str, Any]],
    lag: float,
    skip: int = 0,
) -> Level:
    """Client against server figures, and the stage medians.

    ``skip``: leave the first ``skip`` requests (by send, and by arrival on the server) out
    of the TTFT figures and the stages, e.g. the initial burst of a closed loop.
    """
    tokens = sum(line["completion_tokens"] for line in lines)
    first_in = min(line["arrived"] for line in lines)
    window = max(line["t"][-1] for line in lines) - first_in
    records = sorted(run.measured, key=lambda r: r.sent)
    start, end = records[0].started, max(r.end or 0.0 for r in records)
    client_ttfts = [t for r in records[skip:] if (t := r.ttft) is not None]
    lines = list(lines)[skip:]
    # This process's request writes during the measured window, matched to the server's
    # lines by the connection's port: the latest write on that port before the request
    # arrived.
    by_port: dict[int, list[float]] = {}
    for when, port in WIRE:
        if start - 0.001 <= when <= end:
            by_port.setdefault(port, []).append(when)
    wire_to_arrival = []
    wires = []
    for line in lines:
        before = [w for w in by_port.get(int(line["peer"][1]), []) if w <= line["arrived"]]
        if before:
            wires.append(max(before))
            wire_to_arrival.append(line["arrived"] - max(before))
    sends = [r.sent for r in records[skip:]]
    # Sends and writes are matched in order (each send is followed by its write).
    sent_to_wire = [w - s for s, w in zip(sends, sorted(wires), strict=False)]
    arrivals = sorted(r.chunk_times[0] for r in records[skip:] if r.chunk_times)
    writes = sorted(line["first_write"] for line in lines)
    stages = {
        "client: began -> sent (not in TTFT)": _median([r.sent - r.started for r in records]),
        "client: sent -> bytes written": _median(sent_to_wire),
        "loopback: written -> arrived (kernel)": _median(wire_to_arrival),
        "server: arrived -> HTTP layer (loop lag)": _median(
            [line["http_received"] - line["arrived"] for line in lines]
        ),
        "server: HTTP layer -> engine (body, parse)": _median(
            [line["received"] - line["http_received"] for line in lines]
        ),
        "engine: received -> first chunk emitted": _median(
            [line["t"][0] - line["received"] for line in lines]
        ),
        "server: emitted -> first chunk written": _median(
            [line["first_write"] - line["t"][0] for line in lines]
        ),
        "loopback + client: written -> parsed": _median(
            [a - w for a, w in zip(arrivals, writes, strict=False)]
        ),
    }
    return Level(
        label=label,
        client_tput=m.output_throughput,
        server_tput=tokens / window,
        client_ttft=_median(client_ttfts),
        server_ttft=_median([line["first_write"] - line["arrived"] for line in lines]),
        engine_ttft=_median([line["t"][0] - line["received"] for line in lines]),
        client_window=m.duration,
        server_window=window,
        stages=stages,
        max_lag_ms=lag,
    )


def run_level(
    label: str,
    flags: Sequence[str],
    speedup: float,
    concurrency: int,
    requests: int,
    output_len: int,
    steady: bool = False,
) -> list[Level]:
    """Start an emulator, run one closed loop, compare with the trace.

    ``steady``: also compare without the initial burst (the first ``concurrency`` requests).
    """
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        argv = (
            "--emulator-engine",
            "batch",
            "--emulator-speedup",
            str(speedup),
            "--emulator-trace",
            str(trace),
            *flags,
        )
        with running_emulator(Path(tmp), *argv) as emulator:
            workload = Workload(
                input_len=INPUT_LEN,
                output_len=output_len,
                requests=requests,
                warmup=min(concurrency, 8),
            )
            run = LoadGenerator(emulator.url, request_timeout=600).run_closed_loop(
                workload, concurrency
            )
            emulator.stop()
        result = measure(run)
        if result.failed:
            raise SystemExit(f"{label}: {result.failed} requests failed: {result.errors}")
        lines, summary = server_lines(trace, run)
    lag = float((summary or {}).get("max_lag_ms", float("nan")))
    levels = [compare(label, result, run, lines, lag)]
    if steady:
        levels.append(compare(label + " steady", result, run, lines, lag, skip=concurrency))
    return levels


def main() -> int:
    """Run the levels, print the comparison and the stages; exit 1 if a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=128, help="measured requests")
    parser.add_argument("--speedup", type=float, default=2.0, help="emulator speed-up")
    parser.add_argument("--output-len", type=int, default=256)
    options = parser.parse_args()
    c = options.concurrency
    levels = [
        *run_level("floor C=1", (), options.speedup, 1, 16, 32),
        *run_level(f"baseline C={c}", (), options.speedup, c, options.requests, options.output_len),
        # EAGLE3 runs ~half as many tokens per second: twice the speed-up, the same CPU load;
        # 1.5x the requests, so that most of them arrive one at a time (after the first C).
        *run_level(
            f"eagle3 C={c}",
            EAGLE3_FLAGS,
            2 * options.speedup,
            c,
            options.requests * 3 // 2,
            options.output_len,
            steady=True,
        ),
    ]
    print("times are real (wall) time; server = the emulator's trace\n")
    header = (
        f"{'level':<22}{'client tok/s':>13}{'server tok/s':>13}{'error':>9}"
        f"{'client TTFT':>13}{'server TTFT':>13}{'error':>9}{'engine TTFT':>13}{'lag ms':>8}"
    )
    print(header)
    print("-" * len(header))
    for level in levels:
        print(
            f"{level.label:<22}{level.client_tput:>13.1f}{level.server_tput:>13.1f}"
            f"{level.tput_error * 100:>8.3f}%{level.client_ttft * 1000:>10.2f} ms"
            f"{level.server_ttft * 1000:>10.2f} ms{level.ttft_error * 1000:>6.2f} ms"
            f"{level.engine_ttft * 1000:>10.2f} ms{level.max_lag_ms:>8.1f}"
        )
    print("\nwhere a request's TTFT goes (medians, ms)")
    print(f"{'stage':<48}" + "".join(f"{level.label:>20}" for level in levels))
    for stage in levels[0].stages:
        print(f"{stage:<48}" + "".join(f"{level.stages[stage] * 1000:>20.2f}" for level in levels))
    print()
    for level in levels[1:]:
        extra = 1000 * (level.client_window - level.server_window)
        print(
            f"{level.label}: windows client {level.client_window:.3f} s, server "
            f"{level.server_window:.3f} s (client longer by {extra:.2f} ms: the first request's "
            "way in, the last chunk's way out)"
        )
    ok = True
    for level in levels[1:]:
        tput_ok = abs(level.tput_error) <= THROUGHPUT_TARGET
        ttft_ok = abs(level.ttft_error) <= TTFT_TARGET
        ok = ok and tput_ok and ttft_ok
        print(
            f"{level.label}: throughput error <= 1 % {'met' if tput_ok else 'MISSED'}; "
            f"p50 TTFT error <= 2 ms {'met' if ttft_ok else 'MISSED'}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
