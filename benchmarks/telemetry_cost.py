"""Benchmark: what GPU telemetry sampling costs the load generator, side by side.

The same closed loop (C=64, 128 streamed tokens per request, the emulator's batch engine at
speed-up 10) with and without a :class:`~pytest_sglang.gpu.telemetry.TelemetrySampler` running,
alternating, ``--repeats`` times each. The sampler reads fake GPUs that the emulator updates
(``--emulator-gpu-dir``; NVML calls are cheaper than this file's JSON read and rename)
every ``--interval`` seconds (the plugin's default 0.5 s; also try 0.05). Printed: the
client's CPU seconds per 1000 tokens with and without, and their ratio (target: within 2 %).
``time.process_time()`` counts every thread of the process, the sampler's included.

    python benchmarks/telemetry_cost.py [--repeats 7] [--interval 0.5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_sglang.gpu.probes import FakeProbe, write_fake_gpus
from pytest_sglang.gpu.telemetry import TelemetrySampler
from pytest_sglang.loadgen.runner import LoadGenerator
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.testing import running_emulator


def cpu_per_1k(
    generator: LoadGenerator, workload: Workload, sampler: TelemetrySampler | None
) -> float:
    cpu = time.process_time()
    if sampler is not None:
        sampler.start()
    run = generator.run_closed_loop(workload, 64)
    if sampler is not None:
        sampler.stop()
    cpu = time.process_time() - cpu
    tokens = sum(r.output_tokens or 0 for r in run.measured if r.ok)
    return cpu / tokens * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args()
    workload = Workload(input_len=32, output_len=128, requests=128, endpoint="completions",
                        warmup=0)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        gpus = Path(tmp) / "gpus"
        uuids = write_fake_gpus(gpus, 1)
        with running_emulator(
            Path(tmp), "--emulator-engine", "batch", "--emulator-speedup", "10",
            "--emulator-gpu-dir", str(gpus),
        ) as emulator:  # fmt: skip
            generator = LoadGenerator(emulator.url)
            cpu_per_1k(generator, workload, None)  # warm-up: connections, lazy imports
            without: list[float] = []
            with_sampler: list[float] = []
            for repeat in range(args.repeats):
                sampler = TelemetrySampler(FakeProbe(gpus), uuids, interval=args.interval)
                pair = [("without", None), ("with", sampler)]
                for name, s in pair if repeat % 2 == 0 else pair[::-1]:
                    (without if name == "without" else with_sampler).append(
                        cpu_per_1k(generator, workload, s)
                    )
    a, b = statistics.median(without), statistics.median(with_sampler)
    print(f"client CPU-s per 1000 tokens, median of {args.repeats} alternating repeats, "
          f"sampling every {args.interval:g} s")  # fmt: skip
    print(f"  without telemetry: {a:.4f}")
    print(f"  with telemetry:    {b:.4f}")
    ratios = [w / o for w, o in zip(with_sampler, without, strict=True)]
    print(f"  ratio with/without: {b / a:.3f} (per pair {', '.join(f'{r:.3f}' for r in ratios)}; "
          f"median {statistics.median(ratios):.3f}; target within 2 %)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
