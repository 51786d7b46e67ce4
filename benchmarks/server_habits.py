"""The load generator against servers with real servers' habits (issue 13's done-when figures).

Runs ``tests/servers/openai_like.py`` with one habit at a time and measures it as
``sglang_bench`` does (closed loop, ``measure``), then compares the client's figures with the
server's own count of what it streamed (``GET /stats``):

- ``close``: the server closes the connection after every streamed response while advertising
  keep-alive (llama.cpp's server, proxies). Expected: 0 failed requests at C=1, 8, 32 on both
  OpenAI endpoints, the retries on dead pooled connections counted (``connection_retries``),
  output tokens equal to the server's count, throughput within 1 % of the server's own
  (its tokens over the time from its first request to its last token);
- ``finish``: the final ``usage`` rides on the finish chunk, with no usage chunk (llama.cpp):
  same expectations;
- ``stuck``: text arrives but the running usage never counts up: the run must be invalid
  (``tokens_counted`` fails);
- ``early``: the server closes 1 ms after each stream (llama.cpp's habit), many short runs
  at C=1 with one generator's connection habits shared, as ``sglang_bench`` shares the
  server handle's: expected 0 failed and 0 retried measured requests in every run (the
  first run's warm-up learns the habit).

    python benchmarks/server_habits.py [--output-len 64] [--token-ms 5] [--early-runs 30]

Exits non-zero when a figure misses its bound.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_sglang.loadgen.records import ConnectionHabits
from pytest_sglang.loadgen.runner import LoadGenerator
from pytest_sglang.loadgen.workload import Endpoint, Workload
from pytest_sglang.measure.measurement import measure
from tests.servers.process import running_server

HABITS = {"close": ("--close-after-stream",), "finish": ("--usage", "finish")}


def run_one(
    habit: str, endpoint: Endpoint, concurrency: int, output_len: int, token_ms: float
) -> bool:
    """Measure one (habit, endpoint, concurrency); print a row; return whether it passed."""
    requests = max(32, 4 * concurrency)
    workload = Workload(input_len=8, output_len=output_len, requests=requests, warmup=0,
                        endpoint=endpoint)  # fmt: skip
    args = (*HABITS[habit], "--token-ms", str(token_ms))
    with running_server("openai_like", *args) as server:
        run = LoadGenerator(server.url).run_closed_loop(workload, concurrency)
        stats = server.stats()
    m = measure(run)
    server_rate = stats["completion_tokens"] / (stats["last_token"] - stats["first_request"])
    ratio = m.output_throughput / server_rate
    retries = m.check("connection_retries")
    ok = (
        m.failed == 0
        and m.valid
        and m.output_tokens == stats["completion_tokens"]
        and abs(ratio - 1) <= 0.01
    )
    print(
        f"{habit:6} {endpoint:11} C={concurrency:<3} requests {requests:4}  failed {m.failed}  "
        f"retried {sum(r.retries for r in run.records):3}  valid {m.valid!s:5}  tokens "
        f"{m.output_tokens}/{stats['completion_tokens']}  client {m.output_throughput:8.1f} "
        f"tok/s  server {server_rate:8.1f} tok/s  ratio {ratio:.4f}  "
        f"{'PASS' if ok else 'FAIL'}  [connection_retries: {retries.detail}]"
    )
    return ok


def stuck(token_ms: float) -> bool:
    """Text with no countable tokens: the run must be invalid."""
    workload = Workload(input_len=8, output_len=16, requests=8, warmup=0, endpoint="completions")
    with running_server("openai_like", "--stuck-usage", "--usage", "running", "--token-ms",
                        str(token_ms)) as server:  # fmt: skip
        m = measure(LoadGenerator(server.url).run_closed_loop(workload, 2))
    check = m.check("tokens_counted")
    ok = check.passed is False and not m.valid
    print(f"stuck  completions C=2   valid {m.valid}  tokens_counted: {check.detail}  "
          f"{'PASS' if ok else 'FAIL'}")  # fmt: skip
    return ok


def early(endpoint: Endpoint, runs: int) -> bool:
    """Runs of 40 requests at C=1 against a server closing 1 ms after each stream."""
    workload = Workload(input_len=8, output_len=16, requests=40, endpoint=endpoint)
    habits = ConnectionHabits()
    failed = retried = 0
    with running_server("openai_like", "--close-after-stream", "--close-delay-ms", "1",
                        "--token-ms", "1") as server:  # fmt: skip
        for repeat in range(runs):
            run = LoadGenerator(server.url, connections=habits).run_closed_loop(
                workload, 1, repeat=repeat
            )
            failed += sum(1 for r in run.measured if not r.ok)
            retried += sum(r.retries for r in run.measured)
    ok = failed == 0 and retried == 0 and habits.closes_after_response is True
    print(f"early  {endpoint:11} C=1   {runs} runs x 40  failed {failed}  retried {retried}  "
          f"learned: {habits.evidence}  {'PASS' if ok else 'FAIL'}")  # fmt: skip
    return ok


def main() -> None:
    """Run every row and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--token-ms", type=float, default=5.0)
    parser.add_argument("--early-runs", type=int, default=30)
    args = parser.parse_args()
    results = [
        run_one(habit, endpoint, level, args.output_len, args.token_ms)
        for habit in HABITS
        for endpoint in ("completions", "chat")
        for level in (1, 8, 32)
    ]
    results.append(stuck(args.token_ms))
    results += [early(endpoint, args.early_runs) for endpoint in ("completions", "chat")]
    print(f"{sum(results)} of {len(results)} rows pass")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
