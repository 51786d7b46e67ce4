"""How long a request waits for its first token in SGLang's queue, and how long the server
goes without sending any token: the figures behind ``LoadGenerator``'s ``first_token_timeout``.

Runs the emulator with EAGLE-3 (``max_running_requests`` left at its default cap of 48) at
``--emulator-speedup`` and a closed loop at C=250 (32 tokens in, 256 out, like DESIGN §7),
then prints, scaled back to real time by the speed-up:

- the largest TTFT (the queue wait of the unluckiest request: the first-token timeout must not
  count it when it is measured per request);
- the longest silence: the largest gap during which no token reached the client while some
  request waited for its first one (what the first-token timeout counts; see
  ``pytest_sglang.loadgen.watchdog``).

    python benchmarks/queue_wait.py [--speedup 10] [--concurrency 250] [--requests 500]
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pytest_sglang.loadgen import LoadGenerator
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.testing import EAGLE3_FLAGS, free_port, port_open


def main() -> None:
    """Run the measurement and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--speedup", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=250)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--output-len", type=int, default=256)
    args = parser.parse_args()
    port = free_port()
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "pytest_sglang.emulator", "--model-path", "m",
             "--host", "127.0.0.1", "--port", str(port), *EAGLE3_FLAGS,
             "--emulator-speedup", str(args.speedup), "--emulator-load-time", "0",
             "--emulator-warmup-time", "0"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while not port_open(port):
                if time.monotonic() > deadline or process.poll() is not None:
                    log.seek(0)
                    raise SystemExit(f"emulator did not start:\n{log.read().decode()}")
                time.sleep(0.1)
            time.sleep(1.0)
            workload = Workload(input_len=32, output_len=args.output_len,
                                requests=args.requests, warmup=0, seed=1)  # fmt: skip
            generator = LoadGenerator(f"http://127.0.0.1:{port}", first_token_timeout=None)
            run = generator.run_closed_loop(workload, args.concurrency)
        finally:
            process.terminate()
            process.wait(10)
    records = run.measured
    failed = sum(1 for r in records if not r.ok)
    ttfts = sorted(t for r in records if (t := r.ttft) is not None)
    # Silence: the largest gap between successive token arrivals (the run's first send
    # counting as the first) up to the last first token, while requests were still queued.
    last_first = max(r.first_token for r in records if r.first_token is not None)
    times = [min(r.sent for r in records)]
    times += sorted(t for r in records for t in r.chunk_times if t <= last_first)
    silence = max(b - a for a, b in itertools.pairwise(times))
    scale = args.speedup
    print(f"C={args.concurrency}, EAGLE-3 (cap 48), {args.requests} requests of 32 in, "
          f"{args.output_len} out, emulator speed-up {scale:g}: {failed} failed")  # fmt: skip
    print(f"max TTFT (queue wait)        {ttfts[-1]:7.2f} s emulated = "
          f"{ttfts[-1] * scale:7.1f} s real")  # fmt: skip
    print(f"p50 TTFT                     {ttfts[len(ttfts) // 2]:7.2f} s emulated = "
          f"{ttfts[len(ttfts) // 2] * scale:7.1f} s real")  # fmt: skip
    print(f"longest silence before the last first token{silence:7.2f} s emulated = "
          f"{silence * scale:7.1f} s real")  # fmt: skip


if __name__ == "__main__":
    main()
