"""A call's arguments are checked before anything runs, each wrong one named in one form."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pytest_sglang.loadgen.schedule import OpenLoop
from pytest_sglang.measure.budget import Budget, levels_of, open_loop_of, repeats_of


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: levels_of(2.0),
            TypeError,
            "concurrency must be a positive int or a list of "
            "them, got float 2.0; write e.g. concurrency=8",
        ),
        (lambda: levels_of([1, "8"]), TypeError, "got str '8' in [1, '8']"),
        (lambda: levels_of(0), ValueError, "got int 0;"),
        (lambda: levels_of([]), ValueError, "got list [];"),
        (lambda: levels_of(True), TypeError, "got bool True;"),
        (lambda: levels_of([8, 8]), ValueError, "concurrency levels must be distinct"),
        (
            lambda: repeats_of(2.5),
            TypeError,
            "repeats must be a whole number of runs >= 1, got float 2.5; write e.g. repeats=5",
        ),
        (lambda: repeats_of(0), ValueError, "got int 0;"),
        (lambda: Budget.of(5), ValueError, "allow_errors must be between 0 and 1"),
        (lambda: Budget.of("5%"), TypeError, "got str '5%'; write e.g. allow_errors=0.05"),
        (lambda: Budget.of(0, "token_counts"), TypeError, "allow_checks must be a list"),
        (lambda: Budget.of(0, ["token_count"]), ValueError, "no validity check 'token_count'"),
        (lambda: open_loop_of(None, None, "poisson", 8), ValueError, "give its rate too"),
        (lambda: open_loop_of(4, 10.0, "poisson", None), ValueError, "not both"),
    ],
)
def test_a_wrong_argument_says_what_to_write(
    call: Callable[[], object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        call()
    assert message in str(raised.value)


def test_right_arguments_pass_through() -> None:
    assert levels_of(8) == [8]
    assert levels_of(range(1, 4)) == [1, 2, 3]
    assert repeats_of(5) == 5
    assert Budget.of(0.05, ["token_counts"]) == Budget(0.05, frozenset({"token_counts"}))
    assert open_loop_of(None, None, "poisson", None) is None
    assert open_loop_of(None, 20.0, "constant", 64) == OpenLoop(20.0, "constant", 64)
