"""The session cache never hands a measurement to another server, workload, load or number
of repeats: each of them is part of its key."""

from __future__ import annotations

import itertools

from pytest_sglang.loadgen.schedule import ClosedLoop, Load, OpenLoop
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.bench import cache_key

W = Workload(input_len=8, output_len=4, requests=64)
LOADS: tuple[Load, ...] = (
    ClosedLoop(8),
    ClosedLoop(16),
    OpenLoop(8.0),
    OpenLoop(8.5),
    OpenLoop(8.0, "constant"),
    OpenLoop(8.0, max_concurrency=8),
    OpenLoop(8.0, max_concurrency=16),
)


def test_every_part_of_a_measurement_is_in_its_cache_key() -> None:
    keys = {
        cache_key(server, workload, load, repeats)
        for server, workload, load, repeats in itertools.product(
            ("a", "b"), (W, Workload(input_len=8, output_len=4, requests=128)), LOADS, (1, 3)
        )
    }
    assert len(keys) == 2 * 2 * len(LOADS) * 2
    # The same load given again (a rate as an int or a float) is the same measurement.
    assert cache_key("a", W, OpenLoop(8), 1) == cache_key("a", W, OpenLoop(8.0), 1)
