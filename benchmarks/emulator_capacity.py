"""Benchmark: how much load the emulator sustains at C=250 before it becomes the bottleneck.

The batch engine runs in one asyncio loop with the HTTP layer: every token of the baseline is
one SSE event per stream, so at C=250 and speed-up F the emulator must emit about 773 F events
per second. This measures, for a list of speed-ups, a closed loop of 250 streams (32 tokens
in, 256 out, two waves) with the project's load generator and prints:

- the throughput the client measured, in model tok/s (divided by F) and against the model's
  own prediction (``simulate_closed_loop``): 1.00 means the emulator kept the model's pace;
- the events (token chunks) and tokens per second of real time;
- the CPU the emulator process and the client used (cores; one event loop each, so 1.0 is
  the emulator's ceiling) and the engine's own report of how far it fell behind the model's
  schedule (``!``: it had to restart the schedule, i.e. it could not keep up).

Below ~1.00 at high speed-ups, part of the shortfall is real-time HTTP cost that does not
shrink with F (250 requests sent and parsed at every wave boundary; see calibration.py),
part is the emulator's CPU.

    python benchmarks/emulator_capacity.py [--speedups 5,10,20,40,60] [--requests 500]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_sglang.emulator.engine.batch_scheduler import simulate_closed_loop
from pytest_sglang.emulator.engine.perf_model import DEFAULT_PARAMS
from pytest_sglang.emulator.engine.trace import read_trace
from pytest_sglang.loadgen import LoadGenerator
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.measurement import measure
from pytest_sglang.testing import running_emulator

CONCURRENCY = 250


def main() -> int:
    """Measure each speed-up and print one row per speed-up."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--speedups", default="5,10,20,40,60", help="comma-separated")
    parser.add_argument("--requests", type=int, default=500, help="measured requests")
    options = parser.parse_args()
    model = simulate_closed_loop(
        DEFAULT_PARAMS,
        concurrency=CONCURRENCY,
        requests=options.requests,
        input_len=32,
        output_len=256,
        max_running=2048,
    ).throughput
    print(f"baseline, C={CONCURRENCY}, 32 in / 256 out; model prediction {model:.1f} tok/s\n")
    header = (
        f"{'speed-up':>8}{'model tok/s':>13}{'vs model':>10}{'tokens/s':>11}{'events/s':>11}"
        f"{'emulator CPU':>14}{'client CPU':>12}{'lag ms':>9}"
    )
    print(header)
    print("-" * len(header))
    for speedup in (float(text) for text in options.speedups.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            trace = Path(tmp) / "trace.jsonl"
            flags = (
                "--emulator-engine",
                "batch",
                "--emulator-speedup",
                str(speedup),
                "--emulator-trace",
                str(trace),
            )
            with running_emulator(Path(tmp), *flags) as emulator:
                server = psutil.Process(emulator.process.pid)
                workload = Workload(input_len=32, output_len=256, requests=options.requests)
                generator = LoadGenerator(emulator.url, request_timeout=600)
                cpu_server = sum(server.cpu_times()[:2])
                cpu_client = time.process_time()
                started = time.perf_counter()
                run = generator.run_closed_loop(workload, CONCURRENCY)
                wall = time.perf_counter() - started
                cpu_server = sum(server.cpu_times()[:2]) - cpu_server
                cpu_client = time.process_time() - cpu_client
                emulator.stop()
            _, _, summary = read_trace(trace)
        result = measure(run)
        if result.failed:
            raise SystemExit(f"x{speedup:g}: {result.failed} failed: {result.errors}")
        events = sum(len(r.chunk_times) for r in run.records)
        tokens = sum(r.output_tokens or 0 for r in run.records)
        summary = summary or {}
        lag = f"{summary.get('max_lag_ms', float('nan')):.0f}"
        if summary.get("lag_resets"):
            lag += "!"
        print(
            f"{'x' + format(speedup, 'g'):>8}{result.output_throughput / speedup:>13.1f}"
            f"{result.output_throughput / speedup / model:>10.3f}{tokens / wall:>11.0f}"
            f"{events / wall:>11.0f}{cpu_server / wall:>14.2f}{cpu_client / wall:>12.2f}"
            f"{lag:>9}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
