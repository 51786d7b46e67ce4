"""Benchmark: when is the load generator itself the bottleneck, and do more processes help?

Against a fast streaming server of the test suite (``tests/servers/openai_like.py``, raw
asyncio), closed loops at each concurrency level, each with one and with two load-generator
processes, interleaved (the order alternates every pair), ``--pairs`` times. The server
paces every stream at ``--token-ms`` a token, ``--tokens-per-write`` tokens a write (the
offered load is ``C * 1000 / token_ms`` tokens per second; writing 32 tokens at a time from
responses rendered once keeps the server's own CPU low, so the client is what saturates on
the same cores); ``--token-ms 0`` is unpaced. For each run: the client's throughput, the
server's own (tokens from the first measured request to the last token written, from its
``/stats``), their difference, the client's CPU (cores; the busiest process of two) and
event-loop lag p99, and the ``client_bound`` validity check: flagged ("yes"), passed
("no"), or not judged ("n/j": the loop was late while its CPU stayed under the limit, i.e.
other processes held the cores). Then, per level, the medians and how many pairs two
processes won.

On the 2-core development machine (quiet, the server on the same cores), C=192 offers more
than one process can read (about 150,000 tokens/s) and less than two can: one process is
flagged, two are not and are faster.

    python benchmarks/client_saturation.py [--levels 64 192] [--pairs 5] [--token-ms 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the test servers live in tests/

from pytest_sglang.loadgen.runner import LoadGenerator
from pytest_sglang.loadgen.schedule import ClosedLoop
from pytest_sglang.loadgen.workers import RunPlan, run_sharded
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.measurement import measure
from tests.servers.process import running_server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", type=int, nargs="+", default=[64, 192])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--token-ms", type=float, default=1.0)
    parser.add_argument("--tokens-per-write", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--requests-per-slot", type=int, default=8)
    args = parser.parse_args()
    pace = (
        "unpaced"
        if not args.token_ms
        else f"{args.token_ms:g} ms a token, {args.tokens_per_write} tokens a write "
        f"(offered C * {1000 / args.token_ms:.0f} tok/s)"
    )
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start; "
          f"server {pace}")  # fmt: skip
    print(f"{'C':>5} {'pair':>4} {'proc':>4} {'client':>8} {'server':>8} {'diff':>7} "
          f"{'cpu':>5} {'lag p99':>8} {'bound':>5}")  # fmt: skip
    # (level, processes) -> [(client tok/s, diff %, flagged)]
    seen: dict[tuple[int, int], list[tuple[float, float, bool | None]]] = {}
    pacing = ("--token-ms", str(args.token_ms), "--tokens-per-write", str(args.tokens_per_write))
    with running_server("openai_like", *pacing) as server:
        for level in args.levels:
            workload = Workload(
                input_len=8, output_len=args.output_len, endpoint="completions",
                requests=level * args.requests_per_slot, warmup=level,
            )  # fmt: skip
            for pair in range(args.pairs):
                # Alternate which goes first: a drift in the machine's load hits both alike.
                for processes in (1, 2) if pair % 2 == 0 else (2, 1):
                    # The server's counts start with the measured requests (after the warm-up).
                    generator = LoadGenerator(server.url, before_measured=server.reset_stats)
                    plan = RunPlan(generator.options, workload, ClosedLoop(level))
                    run = (
                        generator.run_closed_loop(workload, level)
                        if processes == 1
                        else run_sharded(plan, processes, before_measured=server.reset_stats)
                    )
                    stats = server.stats()
                    m = measure(run)
                    window = stats["last_token"] - stats["first_request"]
                    truth = stats["completion_tokens"] / window
                    check = next((c for c in m.checks if c.name == "client_bound"), None)
                    flagged = None if check is None or check.passed is None else not check.passed
                    diff = (m.output_throughput / truth - 1) * 100
                    seen.setdefault((level, processes), []).append(
                        (m.output_throughput, diff, flagged)
                    )
                    print(
                        f"{level:>5} {pair + 1:>4} {processes:>4} {m.output_throughput:>8.0f} "
                        f"{truth:>8.0f} {diff:>+6.1f}% {m.client_cpu_fraction or 0:>5.2f} "
                        f"{(m.loop_lag_p99 or 0) * 1000:>6.1f}ms {_verdict(flagged):>5}",
                        flush=True,
                    )
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    print("\nper level: median client tok/s (1 process | 2 processes), ratio 2/1, pairs 2 won, "
          "flagged client-bound, largest |client - server| among runs not flagged")  # fmt: skip
    for level in args.levels:
        one, two = seen[(level, 1)], seen[(level, 2)]
        won = sum(b[0] > a[0] for a, b in zip(one, two, strict=True))
        ratio = statistics.median(b[0] / a[0] for a, b in zip(one, two, strict=True))
        calm = [abs(d) for _, d, f in one + two if not f]
        print(
            f"C={level}: {statistics.median(t for t, _, _ in one):.0f} | "
            f"{statistics.median(t for t, _, _ in two):.0f} tok/s, median ratio {ratio:.2f}, "
            f"2 processes won {won}/{len(one)}, flagged {sum(f is True for *_, f in one)}/"
            f"{len(one)} (1 process) and {sum(f is True for *_, f in two)}/{len(two)} "
            f"(2), worst |diff| not flagged {max(calm, default=0):.1f}%"
        )
    return 0


def _verdict(flagged: bool | None) -> str:
    return "n/j" if flagged is None else "yes" if flagged else "no"


if __name__ == "__main__":
    raise SystemExit(main())
