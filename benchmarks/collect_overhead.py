"""Benchmark: what the plugin adds to ``pytest --collect-only`` in an empty directory.

Runs ``pytest --collect-only`` with the plugin and with ``-p no:sglang``, interleaved (so
drift on a noisy machine hits both sides alike) and in alternating order, A B then B A (on
this shared machine whichever side runs first in a pair was measured up to 10 % slower),
and prints the medians, their ratio and the median of the per-pair ratios.
Target: ratio <= 1.03.

Bytecode: installed packages come with compiled ``.pyc`` files, an editable checkout gets
them on first import, unless ``PYTHONDONTWRITEBYTECODE`` is set (it is on some development
machines): then every run recompiles the plugin's sources and the benchmark would measure
the compiler. The child runs drop that variable, and a warm-up run writes the bytecode.

    python benchmarks/collect_overhead.py [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_once(cwd: str, extra: list[str]) -> float:
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *extra],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=ENV,
    )
    elapsed = time.perf_counter() - start
    # Exit code 5: "no tests collected", expected in an empty directory.
    if result.returncode not in (0, 5):
        raise SystemExit(f"pytest failed ({result.returncode}):\n{result.stdout}{result.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="runs per side (default 30)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as empty:
        run_once(empty, [])  # warm the filesystem cache and .pyc files
        with_plugin: list[float] = []
        without: list[float] = []
        for index in range(args.runs):
            if index % 2 == 0:
                with_plugin.append(run_once(empty, []))
                without.append(run_once(empty, ["-p", "no:sglang"]))
            else:
                without.append(run_once(empty, ["-p", "no:sglang"]))
                with_plugin.append(run_once(empty, []))
    med_with, med_without = statistics.median(with_plugin), statistics.median(without)
    pairs = statistics.median(a / b for a, b in zip(with_plugin, without, strict=True))
    print(f"runs per side:            {args.runs}")
    print(f"median with plugin:       {med_with * 1000:.1f} ms")
    print(f"median with -p no:sglang: {med_without * 1000:.1f} ms")
    print(f"ratio (target <= 1.03):   {med_with / med_without:.3f}")
    print(f"median per-pair ratio:    {pairs:.3f}")


if __name__ == "__main__":
    main()
