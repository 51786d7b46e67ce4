"""OpenLoop: the open-loop load sglang_bench takes (rate, arrivals, cap), checked and keyed."""

from __future__ import annotations

import pytest

from pytest_sglang.loadgen.schedule import OpenLoop


def test_key_and_description_name_every_part() -> None:
    capped = OpenLoop(20, "poisson", 64)
    assert capped.rate == 20.0 and isinstance(capped.rate, float)
    assert capped.describe() == "20 req/s poisson, at most 64 in flight"
    assert OpenLoop(20.0, "constant").describe() == "20 req/s constant"
    keys = {OpenLoop(20.0).key(), OpenLoop(20.5).key(), OpenLoop(20.0, "constant").key(),
            capped.key()}  # fmt: skip
    assert len(keys) == 4
    assert OpenLoop(20).key() == OpenLoop(20.0).key()
    assert capped.as_dict() == {"rate": 20.0, "arrival": "poisson", "max_concurrency": 64}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0.0,), "rate must be a finite number > 0"),
        ((float("inf"),), "rate must be a finite number > 0"),
        ((5.0, "bursty"), "arrival must be one of 'poisson', 'constant'"),
        ((5.0, "poisson", 0), "max_concurrency must be an integer >= 1"),
        ((5.0, "poisson", True), "max_concurrency must be an integer >= 1"),
    ],
)
def test_bad_loads_are_refused(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OpenLoop(*args)  # type: ignore[arg-type]


def test_stored_open_loop_rows_keep_the_rate_in_their_fingerprint() -> None:
    from pytest_sglang.measure.session_format import fingerprint_of, result_of

    row = {"server": "a", "workload": {"input_len": 8, "output_len": 4, "requests": 10,
           "endpoint": "generate"}, "concurrency": 0, "schedule": "blocks", "config": {},
           "runs": []}  # fmt: skip
    closed = fingerprint_of(row).fields
    assert "open_loop" not in closed  # closed loops keep the fingerprint they had
    slow = fingerprint_of({**row, "rate": 5.0, "arrival": "poisson", "max_concurrency": None})
    fast = fingerprint_of({**row, "rate": 10.0, "arrival": "poisson", "max_concurrency": None})
    assert slow != fast
    assert slow.fields["open_loop"] == {"rate": 5.0, "arrival": "poisson", "max_concurrency": None}
    rebuilt = result_of({**row, "rate": 5.0, "arrival": "constant", "max_concurrency": 4})
    assert rebuilt.open_loop == OpenLoop(5.0, "constant", 4)
    assert result_of(row).open_loop is None
