"""Benchmark: a long measurement, as ``sglang_bench`` takes it: errors, accuracy, memory, fds.

Runs ``Bench`` (what the ``sglang_bench`` fixture returns: the server pool, the readiness
gate, the load generator, the session cache) in this process against a sped-up batch-engine
emulator, closed loop at C=256 for 10,240 measured requests (after a warm-up wave), twice,
and prints:

- **errors**: failed requests of each run (target 0);
- **throughput against the trace**: the load generator's output tok/s against the emulator's
  own (``--emulator-trace``: output tokens / last token emitted - first measured request
  arrived, on the same clock; see ``benchmarks/loadgen_accuracy.py``); target within 1 %;
- **peak RSS** of this process during the runs (sampled every 50 ms);
- **RSS retained per request** after each run, with its result in the session cache as in a
  pytest session (``gc.collect()`` first), against the RSS before that run. "Before" is
  after a warm-up measurement of 512 requests (the load generator's imports, its first
  connections); run 1 still pays the allocator's one-off growth to the run's transient
  peak (memory it keeps for reuse, whatever the number of requests), so the figure that
  grows with requests is run 2's; target < 1 KB;
- **open file descriptors** before, at most during, and after the runs (target: back to the
  starting count).

    python benchmarks/soak.py [--requests 10240] [--concurrency 256] [--output-len 64]
        [--speedup 10] [--runs 2]
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_sglang.config.settings import Settings
from pytest_sglang.config.values import ServerUrl, Sourced
from pytest_sglang.emulator.engine.trace import read_trace
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.bench import Bench
from pytest_sglang.measure.measurement import Measurement
from pytest_sglang.measure.results import BenchResult
from pytest_sglang.server.pool import ServerPool
from pytest_sglang.testing import running_emulator

INPUT_LEN = 32
THROUGHPUT_TARGET = 0.01
RETAINED_TARGET = 1024


class Sampler:
    """Samples this process's RSS and open fds every ``interval`` seconds in a thread."""

    def __init__(self, interval: float = 0.05) -> None:
        self.process = psutil.Process()
        self.interval = interval
        self.peak_rss = 0
        self.peak_fds = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_rss = max(self.peak_rss, self.process.memory_info().rss)
            self.peak_fds = max(self.peak_fds, self.process.num_fds())
            self._stop.wait(self.interval)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def rss() -> int:
    """This process's resident set size after a full collection."""
    gc.collect()
    return int(psutil.Process().memory_info().rss)


def fds() -> int:
    """This process's open file descriptors."""
    return int(psutil.Process().num_fds())


def server_throughput(trace: Path, run: Measurement) -> float:
    """Output tok/s of ``run``'s measured requests as the emulator's trace saw them.

    The emulator writes its trace out when it stops: read it after that.
    """
    clock, requests, _ = read_trace(trace)
    shift = clock["monotonic"] - clock["wall"]  # the trace's wall clock -> monotonic
    start = min(r.sent for r in run.records)
    end = max(r.end or 0.0 for r in run.records)
    lines = [
        line
        for line in requests
        if line["http_received"] is not None
        and line["t"]
        and line["prompt_tokens"] == INPUT_LEN
        and start - 0.05 <= line["arrived"] + shift <= end
    ]
    if len(lines) != run.requests:
        raise SystemExit(f"{len(lines)} trace lines for {run.requests} measured requests")
    tokens = sum(line["completion_tokens"] for line in lines)
    window = max(line["t"][-1] for line in lines) - min(line["arrived"] for line in lines)
    return float(tokens / window)


@dataclass
class Figures:
    label: str
    failed: int
    requests: int
    client_tput: float
    server_tput: float
    seconds: float
    rss_before: int
    rss_after: int

    @property
    def error(self) -> float:
        return self.client_tput / self.server_tput - 1

    @property
    def retained(self) -> float:
        return (self.rss_after - self.rss_before) / self.requests


def settings_for(url: str) -> Settings:
    """The settings a session attached to ``url`` as server ``soak`` would have."""
    return Settings(
        servers=(ServerUrl("soak", url, "soak benchmark"),),
        ready_timeout=Sourced(120.0, "soak benchmark"),
        api_key=Sourced(None, "default"),
        require=Sourced(False, "default"),
        expectations=(),
    )


def main() -> int:
    """Run the soak; print the figures; exit 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10240, help="measured requests per run")
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--speedup", type=float, default=10.0, help="emulator speed-up")
    parser.add_argument("--runs", type=int, default=2)
    options = parser.parse_args()
    c = options.concurrency
    figures: list[Figures] = []
    runs: list[Measurement] = []
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        argv = (
            "--emulator-engine", "batch", "--emulator-speedup", str(options.speedup),
            "--emulator-trace", str(trace), "--max-running-requests", str(c),
        )  # fmt: skip
        with running_emulator(Path(tmp), *argv) as emulator:
            pool = ServerPool(
                settings_for(emulator.url),
                log_dir=Path(tmp),
                progress=lambda line: print(line, flush=True),
            )
            bench = Bench(pool)
            pool.get("soak")  # the gate
            # A small measurement first: the load generator's imports and first connections.
            warm = Workload(INPUT_LEN, options.output_len, requests=512, warmup=0, seed=-1)
            bench("soak", warm, concurrency=c, repeats=1)
            fds_before, first_rss = fds(), rss()
            print(f"before: RSS {first_rss / 2**20:.1f} MiB, {fds_before} open fds", flush=True)
            kept: list[BenchResult] = []
            with Sampler() as sampler:
                for index in range(options.runs):
                    workload = Workload(
                        input_len=INPUT_LEN,
                        output_len=options.output_len,
                        requests=options.requests,
                        warmup=c,
                        seed=index,  # a new cache key: a new measurement, as a new test's
                    )
                    before = rss()
                    started = time.monotonic()
                    result = bench("soak", workload, concurrency=c, repeats=1, allow_errors=1.0)
                    seconds = time.monotonic() - started
                    assert isinstance(result, BenchResult)
                    kept.append(result)  # the bench's session cache holds it too
                    (run,) = result.runs
                    del result
                    after = rss()
                    runs.append(run)
                    figures.append(
                        Figures(
                            f"run {index + 1}",
                            run.failed,
                            run.requests,
                            run.output_throughput,
                            0.0,
                            seconds,
                            before,
                            after,
                        )
                    )
                    print(f"run {index + 1}: done in {seconds:.1f}s", flush=True)
            fds_after = fds()
            peak_rss, peak_fds = sampler.peak_rss, sampler.peak_fds
            pool.close()
            emulator.stop()  # writes the trace out
        for figure, run in zip(figures, runs, strict=True):
            figure.server_tput = server_throughput(trace, run)
    cached = sum(len(r.runs[0].records) for r in kept)
    print(f"\nC={c}, {options.requests} measured requests per run (+{c} warm-up), output "
          f"{options.output_len} tokens, emulator speed-up {options.speedup:g}\n")  # fmt: skip
    header = (
        f"{'run':<8}{'failed':>8}{'client tok/s':>14}{'server tok/s':>14}{'error':>9}"
        f"{'seconds':>9}{'RSS before':>12}{'RSS after':>11}{'retained/request':>18}"
    )
    print(header)
    print("-" * len(header))
    for f in figures:
        print(
            f"{f.label:<8}{f.failed:>8}{f.client_tput:>14.1f}{f.server_tput:>14.1f}"
            f"{f.error * 100:>8.3f}%{f.seconds:>9.1f}{f.rss_before / 2**20:>9.1f} MiB"
            f"{f.rss_after / 2**20:>7.1f} MiB{f.retained:>13.0f} bytes"
        )
    print(
        f"\npeak RSS {peak_rss / 2**20:.1f} MiB; open fds before {fds_before}, at most "
        f"{peak_fds} during, {fds_after} after; {cached} records in the session cache"
    )
    ok = True
    checks: list[tuple[str, Any]] = [
        ("0 failed requests", all(f.failed == 0 for f in figures)),
        ("throughput within 1 % of the trace", all(abs(f.error) <= THROUGHPUT_TARGET
                                                    for f in figures)),
        ("RSS retained per request < 1 KB (after the last run)",
         figures[-1].retained < RETAINED_TARGET),
        ("open fds back to the starting count", fds_after <= fds_before),
    ]  # fmt: skip
    for name, met in checks:
        ok = ok and bool(met)
        print(f"{name}: {'met' if met else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
