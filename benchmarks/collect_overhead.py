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

On a loaded machine the wall times drift by more than the plugin costs; ``--instructions``
counts instead what one run of each side executes (valgrind's callgrind, one thread of
OpenBLAS, a fixed hash seed), a figure that does not depend on the load (a minute or two).

    python benchmarks/collect_overhead.py [--runs 30] [--instructions]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
NO_PLUGIN = ["-p", "no:sglang"]
PYTEST = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]


def collect(cwd: str, argv: list[str], env: dict[str, str] = ENV) -> None:
    """Run ``argv`` (a ``pytest --collect-only`` run); stop the benchmark if pytest failed."""
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env)
    # Exit code 5: "no tests collected", expected in an empty directory.
    if result.returncode not in (0, 5):
        raise SystemExit(f"pytest failed ({result.returncode}):\n{result.stdout}{result.stderr}")


def run_once(cwd: str, extra: list[str]) -> float:
    start = time.perf_counter()
    collect(cwd, [*PYTEST, *extra])
    return time.perf_counter() - start


def instructions(cwd: str, extra: list[str]) -> int:
    """Return the instructions one ``pytest --collect-only`` run executes (needs valgrind)."""
    env = {**ENV, "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as out:
        valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/run.%p"]
        collect(cwd, [*valgrind, *PYTEST, *extra], env)
        # pytest's own process has the largest count (a forked helper writes a smaller file).
        return max(
            int(line.split()[1])
            for path in Path(out).iterdir()
            for line in path.read_text().splitlines()
            if line.startswith("summary:")
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="runs per side (default 30)")
    parser.add_argument("--instructions", action="store_true", help="count instructions instead")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as empty:
        run_once(empty, [])  # warm the filesystem cache and .pyc files
        if args.instructions:
            with_count, without_count = instructions(empty, []), instructions(empty, NO_PLUGIN)
            print(f"instructions with plugin:       {with_count:,}")
            print(f"instructions with -p no:sglang: {without_count:,}")
            print(f"ratio (target <= 1.03):         {with_count / without_count:.4f}")
            return
        with_plugin: list[float] = []
        without: list[float] = []
        for index in range(args.runs):
            if index % 2 == 0:
                with_plugin.append(run_once(empty, []))
                without.append(run_once(empty, NO_PLUGIN))
            else:
                without.append(run_once(empty, NO_PLUGIN))
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
