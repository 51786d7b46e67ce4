"""Benchmark: when is the load generator itself the bottleneck, and do more processes help?

Against a fast streaming server of the test suite (``tests/servers/openai_like.py``: raw
asyncio, each stream paced at ``--token-ms`` per token, so the offered load is
``C * 1000 / token_ms`` tokens per second), closed loops at rising concurrency, each with one
and with two load-generator processes, interleaved. For each: the client's throughput, the
server's own (tokens / first request -> last token, from its ``/stats``), their difference,
and the client's CPU (cores) and event-loop lag p99. Where the client falls behind the
server, its loop lag and CPU show it: that is what the ``client_bound`` validity check's
thresholds are set from.

    python benchmarks/client_saturation.py [--levels 8 32 64 128] [--token-ms 1]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the test servers live in tests/

from pytest_sglang.loadgen.runner import LoadGenerator
from pytest_sglang.loadgen.workers import sharded_closed_loop
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.measurement import measure
from tests.servers.process import running_server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", type=int, nargs="+", default=[8, 32, 64, 128])
    parser.add_argument("--token-ms", type=float, default=1.0)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--requests-per-slot", type=int, default=4)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start")
    print(f"{'C':>5} {'proc':>4} {'offered':>8} {'client':>8} {'server':>8} {'diff':>7} "
          f"{'cpu':>5} {'lag p99':>8} {'bound':>5}")  # fmt: skip
    with running_server("openai_like", "--token-ms", str(args.token_ms)) as server:
        for level in args.levels:
            workload = Workload(
                input_len=8, output_len=args.output_len, endpoint="completions",
                requests=level * args.requests_per_slot, warmup=0,
            )  # fmt: skip
            for processes in (1, 2):
                server.reset_stats()
                generator = LoadGenerator(server.url)
                run = (
                    generator.run_closed_loop(workload, level)
                    if processes == 1
                    else sharded_closed_loop(generator, workload, level, processes)
                )
                stats = server.stats()
                m = measure(run)
                window = stats["last_token"] - stats["first_request"]
                truth = stats["completion_tokens"] / window
                check = next((c for c in m.checks if c.name == "client_bound"), None)
                print(
                    f"{level:>5} {processes:>4} {level * 1000 / args.token_ms:>8.0f} "
                    f"{m.output_throughput:>8.0f} {truth:>8.0f} "
                    f"{(m.output_throughput / truth - 1) * 100:>+6.1f}% "
                    f"{m.client_cpu_fraction or 0:>5.2f} {(m.loop_lag_p99 or 0) * 1000:>6.1f}ms "
                    f"{_verdict(check.passed if check is not None else None):>5}"
                )
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


def _verdict(passed: bool | None) -> str:
    """The client_bound check: flagged ("yes"), passed ("no") or not judged ("n/j")."""
    return "yes" if passed is False else "no" if passed else "n/j"


if __name__ == "__main__":
    raise SystemExit(main())
