"""Where a finished stream's last bytes go when the server resets the connection (issue 23.3).

Runs ``tests/servers/httplib_like.py`` (cpp-httplib's socket habits: blocking threads,
Nagle on, a close 1 ms after each stream while advertising keep-alive) in three modes and
measures short C=1 runs against each with the load generator, as ``sglang_bench`` does:

- ``graceful``: ``close()``: a FIN after the last byte;
- ``reset``: ``SO_LINGER`` 0, a TCP reset: Linux discards what the server had not sent yet,
  and Nagle's algorithm holds the stream's closing writes (usage, ``[DONE]``, the chunked
  terminator) until the client acknowledges the previous segment;
- ``reset, nodelay``: the same reset with ``TCP_NODELAY``: nothing is held back.

For each mode it prints the requests counted failed, how many of those had every requested
token, and the retries. Expected: failures only under ``reset``, each with all its tokens
(the bytes lost are the server's unsent tail, not anything the client could have kept).

    python benchmarks/reset_tail.py [--runs 10] [--requests 40]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_sglang.loadgen.runner import LoadGenerator
from pytest_sglang.loadgen.workload import Workload
from tests.servers.process import running_server

MODES = {"graceful": (), "reset": ("--abort",), "reset, nodelay": ("--abort", "--nodelay")}


def main() -> None:
    """Print one row per mode: requests, failed, failed with every token, retried."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--requests", type=int, default=40)
    args = parser.parse_args()
    workload = Workload(input_len=8, output_len=16, requests=args.requests, warmup=0,
                        endpoint="completions")  # fmt: skip
    print(f"{'mode':16} {'requests':>8} {'failed':>7} {'all tokens':>10} {'retried':>7}")
    for mode, flags in MODES.items():
        sent = failed = whole = retried = 0
        with running_server("httplib_like", *flags) as server:
            for _ in range(args.runs):
                run = LoadGenerator(server.url).run_closed_loop(workload, 1)
                for record in run.records:
                    sent += 1
                    retried += record.retries
                    if record.error is not None:
                        failed += 1
                        whole += sum(record.chunk_tokens) >= record.output_len
        print(f"{mode:16} {sent:8d} {failed:7d} {whole:10d} {retried:7d}")


if __name__ == "__main__":
    main()
