"""The baseline options: shown by --help, refused when they cannot work."""

from __future__ import annotations

import pytest


def test_help_lists_the_baseline_options(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("-p", "sglang", "--help")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*--sglang-compare=*REF*", "*--sglang-compare-fail=METRIC:PCT*"])


def test_compare_fail_without_compare_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("-p", "sglang", "--sglang-compare-fail=output_throughput:3%")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--sglang-compare-fail: it needs --sglang-compare*"])


def test_a_bad_term_names_the_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("-p", "sglang", "--sglang-compare", "--sglang-compare-fail=mean:5%")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--sglang-compare-fail: *unknown metric*(from --sglang-compare-fail on the command*"]
    )
