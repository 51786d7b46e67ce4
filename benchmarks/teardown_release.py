"""Benchmark: teardown-to-released time of a launched, well-behaved emulator.

Each trial launches the emulator through the plugin's own launch path (profile, process
group, readiness gate, fake GPUs so that the server holds "GPU memory" like a real one),
then times ``Launch.stop()``: SIGTERM to the group, the survivor scan, and the post-flight
wait until the fake GPU's memory is back to the pre-launch baseline. Prints the median of
the whole teardown and of its parts. Target: median <= 2 s.

    python benchmarks/teardown_release.py [--trials 7]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from pytest_sglang.config.profiles import Profile
from pytest_sglang.config.settings import Settings
from pytest_sglang.config.values import Sourced
from pytest_sglang.gpu.probes import FakeProbe, write_fake_gpus
from pytest_sglang.server.launcher import Launch

FAST = ("--emulator-load-time", "0", "--emulator-warmup-time", "0",
        "--emulator-health-probe-time", "0")  # fmt: skip


def trial(workdir: Path, index: int) -> tuple[float, float, float]:
    gpus = workdir / f"gpus-{index}"
    write_fake_gpus(gpus, 1)
    probe = FakeProbe(gpus)
    settings = Settings(
        servers=(), ready_timeout=Sourced(60.0, "benchmark"), api_key=Sourced(None, "default"),
        require=Sourced(False, "default"), expectations=(),
        launcher=Sourced("emulator", "benchmark"),
    )  # fmt: skip
    profile = Profile(name="bench", model_path="bench/model", tp=1, args=FAST)
    settings = dataclasses.replace(settings, profiles={"bench": profile})
    target = settings.targets.get("bench")
    assert target is not None
    launch = Launch(target, settings, log_path=workdir / f"bench-{index}.log", gpu=probe)
    launch.start()
    held = probe.snapshot().gpus[0].memory_used
    assert held > 0, "the emulator did not register its fake GPU memory"
    start = time.perf_counter()
    launch.stop()
    total = time.perf_counter() - start
    assert probe.snapshot().gpus[0].memory_used == 0
    assert launch.info.stop is not None and launch.info.release_seconds is not None
    return total, launch.info.stop.seconds, launch.info.release_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=7, help="launches to time (default 7)")
    args = parser.parse_args()
    totals, stops, releases = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.trials):
            total, stop, release = trial(Path(tmp), index)
            totals.append(total)
            stops.append(stop)
            releases.append(release)
    print(f"trials: {args.trials}")
    print(
        f"process teardown (SIGTERM, wait, survivor scan): median {statistics.median(stops):.3f}s"
    )
    print(
        f"post-flight wait for GPU memory:                median {statistics.median(releases):.3f}s"
    )
    print(
        f"teardown to released, total:                    median {statistics.median(totals):.3f}s "
        f"(min {min(totals):.3f}s, max {max(totals):.3f}s; target <= 2s)"
    )


if __name__ == "__main__":
    main()
