"""Benchmark: how often does ``compare`` declare a winner between two identical configurations?

Simulates whole benchmark runs of output throughput: log-normal run-to-run noise at a given
CV, plus occasional slow outliers (thermal or power capping, a noisy neighbour), which is
what shared GPU boxes produce. For each noise setting it runs many trials of

* *null*: both sides drawn from the same distribution: every PASS is a false pass
  (target <= 5% at alpha 0.05; the exact test's size at 5+5 runs is 0.0476);
* *+10%*: side a truly 10% faster: the PASS rate is the power;

at the default 5 runs per side, and prints the PASS / FAIL / INCONCLUSIVE rates, plus for
context the naive rule ``median(a) > median(b)`` that perf gates often use.

    python benchmarks/false_pass_rate.py [--trials 2000] [--runs 5] [--seed 20240611]

Exits with status 1 if a false-pass rate is above 5% beyond binomial noise (the lower end of
its 95% interval above 0.05).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass

from pytest_sglang.verdicts.decision import Outcome, compare

TARGET = 0.05


@dataclass(frozen=True)
class Noise:
    name: str
    cv: float
    outlier_rate: float = 0.0
    outlier_slowdown: float = 0.15


NOISES = [
    Noise("CV 2%", 0.02),
    Noise("CV 3%", 0.03),
    Noise("CV 5%", 0.05),
    Noise("CV 3% + 10% of runs 15% slow", 0.03, outlier_rate=0.10),
]


def draw(rng: random.Random, noise: Noise, level: float, runs: int) -> list[float]:
    sigma = math.sqrt(math.log1p(noise.cv**2))
    out = []
    for _ in range(runs):
        value = level * rng.lognormvariate(-sigma * sigma / 2, sigma)
        if rng.random() < noise.outlier_rate:
            value *= 1.0 - noise.outlier_slowdown
        out.append(value)
    return out


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a binomial proportion."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def simulate(
    rng: random.Random, noise: Noise, effect: float, trials: int, runs: int
) -> tuple[dict[Outcome, int], int, list[int]]:
    counts = dict.fromkeys(Outcome, 0)
    naive = 0
    needed: list[int] = []
    for _ in range(trials):
        b = draw(rng, noise, 700.0, runs)
        a = draw(rng, noise, 700.0 * effect, runs)
        result = compare(a, b, larger_is_better=True)
        counts[result.outcome] += 1
        naive += statistics.median(a) > statistics.median(b)
        if result.repeats_needed is not None:
            needed.append(result.repeats_needed)
    return counts, naive, needed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2000, help="trials per cell (min 40)")
    parser.add_argument("--runs", type=int, default=5, help="runs per side (default 5)")
    parser.add_argument("--effect", type=float, default=1.10, help="true ratio for power")
    parser.add_argument("--seed", type=int, default=20240611)
    args = parser.parse_args(argv)
    if args.trials < 40:
        parser.error("--trials must be at least 40")

    rng = random.Random(args.seed)
    started = time.perf_counter()
    print(
        f"compare(a, b, larger_is_better=True, by=1, alpha=0.05), {args.runs} runs per side, "
        f"{args.trials} trials per row, seed {args.seed}"
    )
    header = (
        f"{'noise':<30} {'truth':>6} {'PASS':>7} {'FAIL':>7} {'INCONCL':>8} "
        f"{'naive':>7}  {'runs needed (median, inconclusive)':<36}"
    )
    print(header)
    print("-" * len(header))
    worst_ok = True
    for noise in NOISES:
        for label, effect in (("same", 1.0), (f"{args.effect - 1:+.0%}", args.effect)):
            counts, naive, needed = simulate(rng, noise, effect, args.trials, args.runs)
            rate = {k: v / args.trials for k, v in counts.items()}
            need = f"{statistics.median(needed):g}" if needed else "-"
            print(
                f"{noise.name:<30} {label:>6} {rate[Outcome.PASS]:>7.1%} "
                f"{rate[Outcome.FAIL]:>7.1%} {rate[Outcome.INCONCLUSIVE]:>8.1%} "
                f"{naive / args.trials:>7.1%}  {need:<36}"
            )
            if effect == 1.0:
                low, high = wilson(counts[Outcome.PASS], args.trials)
                if low > TARGET:
                    worst_ok = False
                print(
                    f"{'':<30} {'':>6} false-pass rate {rate[Outcome.PASS]:.2%} "
                    f"(95% CI {low:.2%}..{high:.2%}; target <= {TARGET:.0%})"
                )
    print("-" * len(header))
    print(
        "PASS under 'same' is a false pass; under the true improvement it is the power. "
        "'naive' is median(a) > median(b)."
    )
    elapsed = time.perf_counter() - started
    print(f"false-pass target {'met' if worst_ok else 'MISSED'}; {elapsed:.1f} s")
    return 0 if worst_ok else 1


if __name__ == "__main__":
    sys.exit(main())
