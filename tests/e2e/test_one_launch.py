"""Exactly one launch per profile, whatever the test order (declared measurements).

Each test compares both profiles at its own level; the measurements are declared with
``@pytest.mark.sglang_measure``, so each launched server takes all of them while it is up
and the tests read the session cache: 2 profiles, 2 launches, in file order, in reverse,
under ``-p randomly`` with several seeds, and under ``-k``.
"""

from __future__ import annotations

import json
import re
import uuid

import pytest

pytestmark = pytest.mark.slow

FAST = (
    '"--emulator-load-time", "0", "--emulator-warmup-time", "0", '
    '"--emulator-health-probe-time", "0", "--emulator-decode-ms", "1"'
)

COMPARISONS = """
import pytest
from pytest_sglang import Workload

CHAT = Workload(input_len=16, output_len=8, requests=8)

@pytest.mark.sglang_measure("baseline", "eagle3", workload=CHAT, concurrency=1, repeats=2)
def test_at_c1(sglang_bench):
    base, spec = sglang_bench.pair("baseline", "eagle3", CHAT, 1, repeats=2)
    assert base.schedule == spec.schedule == "blocks"

@pytest.mark.sglang_measure("baseline", "eagle3", workload=CHAT, concurrency=8, repeats=2)
def test_at_c8(sglang_bench):
    # Asked in the other order on purpose: the declarations, not the calls, decide.
    spec = sglang_bench("eagle3", CHAT, 8, repeats=2)
    base = sglang_bench("baseline", CHAT, 8, repeats=2)
    assert spec.server == "eagle3" and base.server == "baseline"

@pytest.mark.sglang_profile("eagle3")
def test_eagle3_serves(sglang_server):
    assert sglang_server.server_info["speculative_algorithm"] == "EAGLE3"

@pytest.mark.sglang_profile("baseline")
def test_baseline_serves(sglang_server):
    assert sglang_server.server_info["speculative_algorithm"] is None
"""

REVERSED = """
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    items.reverse()
"""


def _profiles(pytester: pytest.Pytester) -> None:
    tag = uuid.uuid4().hex[:8]
    pytester.makepyprojecttoml(f"""
        [tool.pytest-sglang.profiles.baseline]
        model-path = "test-{tag}/model"
        args = [{FAST}]

        [tool.pytest-sglang.profiles.eagle3]
        extends = "baseline"
        args = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
                "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
    """)


def _launches(out: str) -> int:
    found = re.search(r"(\d+) server launch(?:es)?:", out)
    assert found, out
    return int(found.group(1))


def _order(out: str) -> list[str]:
    return re.findall(r"::(test_\w+) PASSED", out)


@pytest.mark.parametrize("order", ["file", "reverse", "randomly-1"])
def test_two_profiles_two_launches_in_any_order(pytester: pytest.Pytester, order: str) -> None:
    _profiles(pytester)
    pytester.makepyfile(test_compare=COMPARISONS)
    args = ["--sglang-launcher=emulator", "-v", "--sglang-report=r.json"]
    if order == "reverse":
        pytester.makeconftest(REVERSED)
    elif order.startswith("randomly"):
        pytest.importorskip("pytest_randomly")
        args += ["-p", "randomly", f"--randomly-seed={order.split('-')[1]}"]
    result = pytester.runpytest_subprocess(*args)
    result.assert_outcomes(passed=4)
    out = result.stdout.str()
    assert _launches(out) == 2, out
    assert "relaunched" not in out
    report = json.loads((pytester.path / "r.json").read_text())
    levels = sorted((m["server"], m["concurrency"]) for m in report["measurements"])
    assert levels == [("baseline", 1), ("baseline", 8), ("eagle3", 1), ("eagle3", 8)]
    assert all(m["schedule"] == "blocks" for m in report["measurements"])
    if order == "file":
        # The tests of one profile run first; the comparisons read the cache after them.
        assert _order(out)[-2:] == ["test_at_c1", "test_at_c8"], _order(out)
        # Each declared measurement says when it is done (a CI log sees the sweep move).
        for server in ("eagle3", "baseline"):
            assert f"declared measurement 2/2 of '{server}' done: {server} @ C=8 (x2)" in out


def test_random_seeds_do_shuffle_the_tests(pytester: pytest.Pytester) -> None:
    # The randomly case above proves something only if a seed changes the order.
    pytest.importorskip("pytest_randomly")
    pytester.makepyfile(test_many="\n".join(f"def test_{i}(): pass" for i in range(12)) + "\n")
    orders = {
        tuple(_order(pytester.runpytest("-v", "-p", "randomly", f"--randomly-seed={s}")
                     .stdout.str()))
        for s in (1, 2, 3)
    }  # fmt: skip
    assert len(orders) == 3


def test_only_the_selected_tests_declarations_are_taken(pytester: pytest.Pytester) -> None:
    _profiles(pytester)
    pytester.makepyfile(test_compare=COMPARISONS)
    result = pytester.runpytest_subprocess(
        "--sglang-launcher=emulator", "-k", "c8", "--sglang-report=r.json"
    )
    result.assert_outcomes(passed=1, deselected=3)
    assert _launches(result.stdout.str()) == 2
    report = json.loads((pytester.path / "r.json").read_text())
    assert sorted(m["concurrency"] for m in report["measurements"]) == [8, 8]


def test_an_undeclared_measurement_relaunches_and_the_summary_says_how_to_avoid_it(
    pytester: pytest.Pytester,
) -> None:
    # The profile groups run first (eagle3's, then baseline's): baseline is up at the end,
    # so an undeclared eagle3 measurement there costs a relaunch.
    _profiles(pytester)
    pytester.makepyfile(
        test_compare=COMPARISONS
        + """
def test_undeclared(sglang_bench):
    sglang_bench("eagle3", CHAT, 4, repeats=2)
"""
    )
    result = pytester.runpytest_subprocess("--sglang-launcher=emulator", "-p", "no:randomly")
    result.assert_outcomes(passed=5)
    out = result.stdout.str()
    assert _launches(out) == 3, out
    result.stdout.fnmatch_lines([
        "*relaunched 'eagle3': asked again by test_compare.py::test_undeclared for a "
        "measurement no selected test declared (eagle3 @ C=4, x2)*sglang_measure*",
    ])  # fmt: skip


def test_a_bad_declaration_is_a_usage_error(pytester: pytest.Pytester) -> None:
    _profiles(pytester)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.sglang_measure("baseline", workload="chat")
        def test_x(sglang_bench):
            pass
    """)
    result = pytester.runpytest_subprocess("--sglang-launcher=emulator")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "*test_a_bad_declaration_is_a_usage_error.py::test_x: @pytest.mark.sglang_measure: "
        "workload= must be a pytest_sglang.Workload, got str*",
    ])  # fmt: skip


def test_a_declared_measurement_that_fails_fails_only_its_test(pytester: pytest.Pytester) -> None:
    # The eager measurement happens in whichever test launched the server; its failed
    # requests are the declaring test's to judge (here, under an error-rate fault).
    _profiles(pytester)
    pytester.makepyfile("""
        import pytest
        from pytest_sglang import Workload

        CHAT = Workload(input_len=8, output_len=4, requests=8)

        @pytest.mark.sglang_profile("baseline")
        def test_launches(sglang_server):
            pass

        @pytest.mark.sglang_measure("baseline", workload=CHAT, concurrency=2, repeats=1)
        def test_declares(sglang_bench):
            sglang_bench("baseline", CHAT, 2, repeats=1)
    """)
    result = pytester.runpytest_subprocess(
        "--sglang-launcher=emulator", "-p", "no:randomly",
        "-osglang_emulator_args=--emulator-fault error-rate=0.5 --emulator-seed 3",
    )  # fmt: skip
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*_ test_declares _*", "*of 8 measured requests failed*"])
    assert _launches(result.stdout.str()) == 1


def test_a_declaration_that_cannot_fill_its_level_is_refused_at_collection(
    pytester: pytest.Pytester,
) -> None:
    _profiles(pytester)
    pytester.makepyfile("""
        import pytest
        from pytest_sglang import Workload

        @pytest.mark.sglang_measure(
            "baseline", workload=Workload(input_len=8, output_len=4, requests=2), concurrency=4
        )
        def test_x(sglang_bench):
            pass
    """)
    result = pytester.runpytest_subprocess("--sglang-launcher=emulator")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*sglang_measure: a run at concurrency 4 with 2 requests*"])
