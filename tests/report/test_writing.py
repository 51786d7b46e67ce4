"""Reports never cost a run (issue 18): safe atomic writes, and failures that only warn."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pytest_sglang.report import writing
from pytest_sglang.report.writing import UnsafeTarget, write_atomic

# -- the writer ------------------------------------------------------------------------------


def test_replaces_a_regular_file_keeping_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    target.write_text("old")
    target.chmod(0o640)
    inode = target.stat().st_ino
    write_atomic(target, "new")
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert target.stat().st_ino != inode  # a new file, renamed over the old one
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary file left


def test_a_new_file_gets_the_umask_mode(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    try:
        write_atomic(tmp_path / "sub" / "new.json", b"{}")
    finally:
        os.umask(umask)
    assert stat.S_IMODE((tmp_path / "sub" / "new.json").stat().st_mode) == 0o644


def test_append_keeps_the_old_content(tmp_path: Path) -> None:
    target = tmp_path / "summary.md"
    target.write_text("previous step\n")
    write_atomic(target, "ours\n", append=True)
    assert target.read_text() == "previous step\nours\n"


def test_a_symlink_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    link = tmp_path / "r.json"
    link.symlink_to(victim)
    for append in (False, True):
        with pytest.raises(UnsafeTarget, match="it is a symbolic link"):
            write_atomic(link, "evil", append=append)
    assert victim.read_text() == "precious" and link.is_symlink()


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    done = threading.Event()

    def write() -> None:
        with pytest.raises(UnsafeTarget, match="FIFO"):
            write_atomic(fifo, "x", append=True)
        done.set()

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    thread.join(5)
    assert done.is_set(), "writing to a FIFO without a reader blocked"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_device_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UnsafeTarget, match="character device"):
        write_atomic(Path("/dev/null"), "x")


def test_a_failed_write_leaves_the_target_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "r.json"
    target.write_text("complete old report")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(target, "x" * 1000)
    assert target.read_text() == "complete old report"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


# -- end to end: a failing write is a warning, never the run's failure ----------------------

SUITE = """
import pytest
from pytest_sglang.report.entries import record
from bench_data import result

def test_measures():
    record({"record": "measurement", **result("a", [100.0, 101.0, 99.0]).as_dict()})

@pytest.mark.parametrize("i", range(3))
def test_plain(i):
    pass
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_suite=SUITE)
    source = Path(__file__).parents[1].joinpath("bench_data.py").read_text()
    pytester.makepyfile(bench_data=source)
    return pytester


def test_full_disk_in_process(suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(path: Path, data: str | bytes, *, append: bool = False) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writing, "write_atomic", full)
    result = suite.runpytest("--sglang-report=r.json", "--sglang-markdown=s.md")
    # Every test ran, the table printed, one warning per output, the tests' exit code.
    result.assert_outcomes(passed=4)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([
        "*= sglang results =*",
        "a * 1    3      100.0*",
        "*= sglang output problems =*",
        "WARNING: the JSON report could not be written to */r.json: No space left on device",
        "WARNING: the Markdown summary could not be written to */s.md: No space left on device",
    ])  # fmt: skip
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert "report written to" not in result.stdout.str()


def _unshare() -> str | None:
    unshare = shutil.which("unshare")
    if unshare is None or sys.platform != "linux":
        return None
    probe = subprocess.run(
        [unshare, "--user", "--map-root-user", "--mount", "true"], capture_output=True
    )
    return unshare if probe.returncode == 0 else None


def test_full_disk_on_a_small_tmpfs(suite: pytest.Pytester) -> None:
    # A real full file system: a 16 KiB tmpfs, mounted in a user and mount namespace of
    # the inner pytest only (no root needed where unprivileged namespaces are allowed).
    unshare = _unshare()
    if unshare is None:
        pytest.skip("cannot mount a tmpfs here (no unshare, or user namespaces off)")
    disk = suite.mkdir("disk")
    (suite.path / "filler.py").write_text(
        "import os, sys\n"
        "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT)\n"
        "try:\n    while True: os.write(fd, b'x' * 512)\n"
        "except OSError: pass\n"
    )
    script = (
        f"mount -t tmpfs -o size=16k tmpfs {disk} && {sys.executable} filler.py {disk}/filler "
        f"&& exec {sys.executable} -m pytest -p no:cacheprovider "
        f"--sglang-report={disk}/r.json --sglang-markdown={disk}/s.md"
    )
    process = subprocess.run(
        [unshare, "--user", "--map-root-user", "--mount", "sh", "-c", script],
        cwd=suite.path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    out = process.stdout + process.stderr
    assert process.returncode == 0, out
    assert "4 passed" in out
    assert "sglang results" in out
    assert f"the JSON report could not be written to {disk}/r.json: No space left" in out, out
    assert f"the Markdown summary could not be written to {disk}/s.md: No space left" in out


def test_a_report_path_that_turns_into_a_link_is_refused_at_write_time(
    suite: pytest.Pytester, tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    report = suite.path / "r.json"
    # After the startup check, someone plants a link where the report goes.
    suite.makeconftest(f"""
        import os, pytest

        @pytest.hookimpl(trylast=True)
        def pytest_sessionstart(session):
            os.symlink({str(victim)!r}, {str(report)!r})
    """)
    result = suite.runpytest(f"--sglang-report={report}")
    result.assert_outcomes(passed=4)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["WARNING: the JSON report could not be written to *r.json: "
                                 "refused to write *: it is a symbolic link*"])  # fmt: skip
    assert victim.read_text() == "precious"


def test_report_still_written_when_the_markdown_fails(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = writing.write_atomic

    def markdown_fails(path: Path, data: str | bytes, *, append: bool = False) -> None:
        if append:
            raise OSError(errno.EIO, "Input/output error")
        real(path, data, append=append)

    monkeypatch.setattr(writing, "write_atomic", markdown_fails)
    result = suite.runpytest("--sglang-report=r.json", "--sglang-markdown=s.md")
    result.assert_outcomes(passed=4)
    assert json.loads((suite.path / "r.json").read_text())["complete"] is True
    result.stdout.fnmatch_lines(["*Markdown summary could not be written*Input/output error"])
