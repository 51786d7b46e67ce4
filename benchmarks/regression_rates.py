"""Benchmark: false-regression rate and power of ``assert_no_regression`` across sessions.

Simulates a stored baseline session and a fresh session of whole runs of output throughput:
log-normal run-to-run noise at a given CV, occasional slow outliers (10 % of runs 15 %
slower), and **drift between sessions** (each session's runs share a log-normal factor: a
relaunch, another day), which is what a stored baseline faces and an interleaved A/B
comparison does not. Each trial is judged exactly as ``assert_no_regression`` judges it
(``regression_verdict``'s margin and ``compare``'s exact statistics), at the default
tolerance of 3 %:

* *identical*: both sessions from the same distribution: every FAIL is a false regression
  (target <= 5 %);
* *-5 %*: the fresh build truly 5 % slower: the FAIL rate is the power against a 5 %
  regression.

    python benchmarks/regression_rates.py [--pairs 400] [--seed 14]

Exits 1 if a false-regression rate is above 5 % beyond binomial noise.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time

from pytest_sglang.verdicts.decision import Outcome, compare
from pytest_sglang.verdicts.regression import _margin

TARGET = 0.05
TOLERANCE = 0.03


def session(rng: random.Random, n: int, cv: float, drift: float, factor: float) -> list[float]:
    sigma = math.sqrt(math.log(1 + cv * cv))
    shift = rng.gauss(0.0, drift)
    runs = []
    for _ in range(n):
        value = 1000.0 * factor * math.exp(shift + rng.gauss(0.0, sigma))
        if rng.random() < 0.10:
            value *= 1 / 1.15
        runs.append(value)
    return runs


def rates(
    rng: random.Random, pairs: int, n: int, cv: float, drift: float, factor: float
) -> dict[Outcome, float]:
    larger, by = _margin("output_throughput", TOLERANCE)
    counts = dict.fromkeys(Outcome, 0)
    for _ in range(pairs):
        stored = session(rng, n, cv, drift, 1.0)
        fresh = session(rng, n, cv, drift, factor)
        counts[compare(fresh, stored, larger_is_better=larger, by=by).outcome] += 1
    return {k: v / pairs for k, v in counts.items()}


def upper_ok(rate: float, pairs: int) -> bool:
    """Whether the lower end of the rate's 95 % Wilson interval is at most the target."""
    z = 1.96
    centre = (rate + z * z / (2 * pairs)) / (1 + z * z / pairs)
    half = (
        z * math.sqrt(rate * (1 - rate) / pairs + z * z / (4 * pairs * pairs)) / (1 + z * z / pairs)
    )
    return centre - half <= TARGET


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=400)
    parser.add_argument("--seed", type=int, default=14)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    started = time.monotonic()
    print(f"assert_no_regression at tolerance {TOLERANCE:.0%}, alpha 0.05, {args.pairs} "
          "simulated session pairs per row (10 % of runs 15 % slow)")  # fmt: skip
    header = (f"{'runs':>4} {'CV':>4} {'drift':>5} | {'identical: FAIL':>15} {'PASS':>5} "
              f"{'INC':>5} | {'-5 %: FAIL (power)':>18} {'PASS':>5} {'INC':>5}")  # fmt: skip
    print(header)
    print("-" * len(header))
    ok = True
    for n in (5, 8, 10):
        for cv in (0.01, 0.02):
            for drift in (0.0, 0.01):
                same = rates(rng, args.pairs, n, cv, drift, 1.0)
                slow = rates(rng, args.pairs, n, cv, drift, 0.95)
                ok &= upper_ok(same[Outcome.FAIL], args.pairs)
                print(f"{n:>4} {cv:>4.0%} {drift:>5.0%} | {same[Outcome.FAIL]:>15.1%} "
                      f"{same[Outcome.PASS]:>5.0%} {same[Outcome.INCONCLUSIVE]:>5.0%} | "
                      f"{slow[Outcome.FAIL]:>18.1%} {slow[Outcome.PASS]:>5.0%} "
                      f"{slow[Outcome.INCONCLUSIVE]:>5.0%}")  # fmt: skip
    print(f"({time.monotonic() - started:.1f} s) false-regression rate "
          f"{'within' if ok else 'ABOVE'} the 5 % target")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
