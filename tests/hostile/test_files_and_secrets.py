"""Hostile input, part one: the files we write and the secrets we hold (issue 24, 23.8).

One table: each row builds one bad input under a fresh folder, runs the real command on it
(``pytest-sglang`` or an inner pytest session, as a subprocess) and asserts what a user
relies on:

* **the exit code**: pytest's (4 for a usage error before any test) or the command line's
  (2 for misuse), never a crash;
* **the message**: what was wrong, where it came from, how to fix it, and no traceback;
* **the time to the verdict**: bounded (generously: the machine may be busy), never a wait
  for a timeout that does not apply;
* **no secret** in the output or in any file the run leaves, and no file lost or clobbered
  (the rows' own checks).

``docs/faults.md`` ("Hostile input") says the same in words.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pytest_sglang.gpu.probes import write_fake_gpus
from pytest_sglang.testing import running_emulator
from tests.faults.harness import FAST, leftovers

pytestmark = pytest.mark.slow

#: Secrets planted in the rows: none may appear in any output or file.
KEY = "sk-hostile-" + uuid.uuid4().hex[:12]
ADMIN_KEY = "adm-hostile-" + uuid.uuid4().hex[:12]
PRECIOUS = "precious: must survive\n"
#: Time to verdict: a command-line call, an inner pytest session (with a launch).
CLI_BOUND, PYTEST_BOUND = 30.0, 90.0
#: A command still running after this long hangs (subprocess.run kills it).
TIMEOUT = 120.0


@dataclass
class Verdict:
    """What a row's command did: its exit code, its output, how long it took."""

    rc: int
    output: str
    seconds: float


@dataclass(frozen=True)
class Row:
    """One bad input, and what must come of it."""

    id: str
    run: Callable[[Path], Verdict]
    exit: int
    message: str
    bound: float
    #: Further checks on the folder after the run (file intact, report record...).
    check: Callable[[Path, Verdict], None] | None = None
    secrets: tuple[str, ...] = field(default=(KEY, ADMIN_KEY))


# -- running the commands ---------------------------------------------------------------------


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_CORE_"))}


def _timed(argv: Sequence[str], cwd: Path, preexec: Callable[[], None] | None = None) -> Verdict:
    start = time.monotonic()
    try:
        done = subprocess.run(
            list(argv), cwd=cwd, env=_env(), capture_output=True, text=True, timeout=TIMEOUT,
            preexec_fn=preexec, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:  # a hang is a verdict too: the row fails
        output = (exc.stdout or b"").decode() + (exc.stderr or b"").decode()
        return Verdict(-1, f"(killed after {TIMEOUT:g}s)\n{output}", time.monotonic() - start)
    return Verdict(done.returncode, done.stdout + done.stderr, time.monotonic() - start)


def cli(tmp: Path, *args: str, preexec: Callable[[], None] | None = None) -> Verdict:
    """Run ``pytest-sglang ARGS`` in ``tmp``."""
    return _timed([sys.executable, "-m", "pytest_sglang.cli", *args], tmp, preexec)


def inner(tmp: Path, suite: str, *args: str, pyproject: str = "") -> Verdict:
    """Run an inner pytest session on ``suite`` in ``tmp`` with the plugin."""
    (tmp / "pyproject.toml").write_text("[tool.pytest.ini_options]\n" + pyproject)
    (tmp / "test_suite.py").write_text(suite)
    argv = [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider",
            "-p", "sglang", f"--basetemp={tmp / 'bt'}", *args]  # fmt: skip
    return _timed(argv, tmp)


def report_file(tmp: Path) -> Path:
    """Write a valid (empty) JSON report; return its path."""
    path = tmp / "shard.json"
    path.write_text(json.dumps({
        "format": "pytest-sglang-report", "version": 1, "complete": True,
        "interrupted": False, "exit_status": 0, "created": "2026-01-01T00:00:00+00:00",
        "updated": "2026-01-01T00:00:00+00:00",
        "environment": {"plugin_version": "0", "python": "3", "pytest": "9", "platform": "x",
                        "sglang_versions": [], "gpus": []},
        "servers": [], "measurements": [], "verdicts": [],
    }))  # fmt: skip
    return path


def precious(tmp: Path) -> Path:
    """Return a file that must not be touched."""
    path = tmp / "precious.txt"
    path.write_text(PRECIOUS)
    return path


def intact(tmp: Path, _: Verdict) -> None:
    """The precious file is as it was."""
    assert (tmp / "precious.txt").read_text() == PRECIOUS


# -- 24.1: output paths of the command line ---------------------------------------------------


def report_to_link(tmp: Path) -> Verdict:
    (tmp / "out.md").symlink_to(precious(tmp))
    return cli(tmp, "report", str(report_file(tmp)), "-o", "out.md")


def merge_to_link(tmp: Path) -> Verdict:
    (tmp / "merged.json").symlink_to(precious(tmp))
    return cli(tmp, "merge", "merged.json", str(report_file(tmp)))


def report_to_directory(tmp: Path) -> Verdict:
    (tmp / "out").mkdir()
    return cli(tmp, "report", str(report_file(tmp)), "-o", "out")


def merge_to_fifo(tmp: Path) -> Verdict:
    os.mkfifo(tmp / "merged.json")
    return cli(tmp, "merge", "merged.json", str(report_file(tmp)))


def merge_summary_to_link(tmp: Path) -> Verdict:
    (tmp / "summary.md").symlink_to(precious(tmp))
    return cli(tmp, "merge", "merged.json", str(report_file(tmp)), "--markdown", "summary.md")


# -- 23.8: writes that corrupt ----------------------------------------------------------------


def merge_on_a_full_disk(tmp: Path) -> Verdict:
    """Replace an existing merged report while no more than 512 bytes may be written."""
    (tmp / "merged.json").write_text(PRECIOUS * 100)

    def small_files() -> None:  # a full disk, deterministically: writes past 512 B fail
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (512, 512))

    return cli(tmp, "merge", "merged.json", str(report_file(tmp)), preexec=small_files)


def old_report_intact(tmp: Path, _: Verdict) -> None:
    assert (tmp / "merged.json").read_text() == PRECIOUS * 100
    assert [p.name for p in tmp.iterdir() if p.name.startswith(".")] == []  # no temporary


PASSING = "def test_ok():\n    pass\n"


def report_and_markdown_one_path(tmp: Path) -> Verdict:
    return inner(tmp, PASSING, "--sglang-report=out.txt", f"--sglang-markdown={tmp / 'out.txt'}")


def junit_and_report_one_path(tmp: Path) -> Verdict:
    (tmp / "sub").mkdir()
    return inner(tmp, PASSING, "--junitxml=sub/../r.xml", f"--sglang-report={tmp / 'r.xml'}")


def nothing_written(tmp: Path, _: Verdict) -> None:
    assert not (tmp / "out.txt").exists() and not (tmp / "r.xml").exists()


# -- 24.2, 24.4: secrets in what the server answers, and in two sources of one header ---------


def locals_of_a_failing_test(tmp: Path) -> Verdict:
    """``pytest -l -vv``: a failing test's locals hold ``/server_info``."""
    suite = (
        "def test_info(sglang_server):\n"
        "    info = sglang_server.server_info\n"
        "    assert info['tp_size'] == 99\n"
    )
    args = ("--api-key", KEY, "--admin-api-key", ADMIN_KEY)
    with running_emulator(tmp, *args, model_path=f"m-{uuid.uuid4().hex[:8]}") as emulator:
        verdict = inner(tmp, suite, f"--sglang-url=srv=http://127.0.0.1:{emulator.port}",
                        f"--sglang-api-key={KEY}", "-l", "-vv", "--junitxml=junit.xml")  # fmt: skip
    (tmp / emulator.log_path.name).unlink()  # the emulator's own log: not the plugin's
    return verdict


def header_and_api_key(tmp: Path) -> Verdict:
    return inner(tmp, PASSING, "--sglang-url=srv=http://127.0.0.1:9", f"--sglang-api-key={KEY}",
                 f"--sglang-header=srv:Authorization=Bearer {ADMIN_KEY}")  # fmt: skip


# -- 24.3, 24.12: launch mode -----------------------------------------------------------------


def _profile(tag: str, args: Sequence[str] = (), extra: str = "") -> str:
    quoted = ", ".join(json.dumps(a) for a in (*FAST, *args))
    return (
        f'[tool.pytest-sglang.profiles.srv]\nmodel-path = "test-{tag}/model"\n'
        f"args = [{quoted}]\n{extra}\n"
    )


SERVER = (
    "import pytest\n\n@pytest.mark.sglang_profile('srv')\ndef test_up(sglang_server):\n    pass\n"
)


def launched_with_a_key(tmp: Path) -> Verdict:
    """A launched server prints its arguments, the API key among them, into its log."""
    tag = uuid.uuid4().hex[:10]
    verdict = inner(tmp, SERVER, "--sglang-launcher=emulator", "--sglang-report=r.json",
                    pyproject=_profile(tag, ["--api-key", KEY]))  # fmt: skip
    assert leftovers(tag, json.loads((tmp / "r.json").read_text())) == []
    return verdict


def log_kept_without_the_key(tmp: Path, _: Verdict) -> None:
    (log,) = (tmp / "bt").rglob("sglang-logs/*.log")
    text = log.read_text()
    assert "server_args=ServerArgs(" in text and "api_key='***'" in text  # the rest is kept


def command_not_executable(tmp: Path) -> Verdict:
    """The profile's command exists but may not be run (permission denied)."""
    (tmp / "serve").write_text("#!/bin/sh\nexit 0\n")
    tag = uuid.uuid4().hex[:10]
    extra = f'command = ["{tmp / "serve"}"]'
    return inner(tmp, SERVER, "-rs", "--sglang-report=r.json",
                 pyproject=_profile(tag, ["--api-key", KEY], extra))  # fmt: skip


def too_few_gpus(tmp: Path) -> Verdict:
    """Pre-flight fails before the process starts: TP=2 on one (fake) GPU."""
    write_fake_gpus(tmp / "gpus", 1)
    tag = uuid.uuid4().hex[:10]
    return inner(tmp, SERVER, "--sglang-launcher=emulator", "--sglang-report=r.json",
                 f"-osglang_gpu_fake={tmp / 'gpus'}",
                 pyproject=_profile(tag, ["--api-key", KEY], "tp = 2"))  # fmt: skip


def launch_recorded(cause: str) -> Callable[[Path, Verdict], None]:
    """The JSON report's launch record says why the launch failed, with the command."""

    def check(tmp: Path, _: Verdict) -> None:
        (launch,) = json.loads((tmp / "r.json").read_text())["launches"]
        assert launch["outcome"] == "failed", launch
        assert re.search(cause, launch["cause"] or ""), launch
        command = launch["command"]
        assert command[command.index("--api-key") + 1] == "***", launch

    return check


# -- 24.13: a malformed fake-GPU file ----------------------------------------------------------


REQUIRES_GPU = "import pytest\n\n@pytest.mark.sglang_requires(gpus=1)\ndef test_gpu():\n    pass\n"


def fake_gpus_missing_a_key(tmp: Path) -> Verdict:
    (tmp / "gpus").mkdir()
    (tmp / "gpus" / "gpus.json").write_text('{"gpus": [{"uuid": "GPU-1", "name": "H200"}]}')
    return inner(tmp, REQUIRES_GPU, f"-osglang_gpu_fake={tmp / 'gpus'}")


def fake_gpus_not_json(tmp: Path) -> Verdict:
    (tmp / "gpus").mkdir()
    (tmp / "gpus" / "gpus.json").write_text('{"gpus": [')
    return inner(tmp, REQUIRES_GPU, f"-osglang_gpu_fake={tmp / 'gpus'}")


def emulator_fake_gpus_wrong_type(tmp: Path) -> Verdict:
    (tmp / "gpus").mkdir()
    (tmp / "gpus" / "gpus.json").write_text(
        '{"gpus": [{"uuid": "GPU-1", "name": "H200", "total_mib": "lots"}]}'
    )
    argv = [sys.executable, "-m", "pytest_sglang.emulator", "--model-path", "m", "--port", "9",
            "--emulator-gpu-dir", str(tmp / "gpus")]  # fmt: skip
    return _timed(argv, tmp)


NO_TRACE = r"(?!.*Traceback)"
ROWS = [
    # 24.1
    Row("report -o symlink", report_to_link, 2,
        r"out\.md.*is a symbolic link.*give the path of a regular file", CLI_BOUND, intact),
    Row("merge to symlink", merge_to_link, 2,
        r"merged\.json.*is a symbolic link.*give the path of a regular file", CLI_BOUND, intact),
    Row("report -o directory", report_to_directory, 2,
        r"'out'.*is a directory.*give the path of a regular file", CLI_BOUND),
    Row("merge to FIFO", merge_to_fifo, 2, r"merged\.json.*is a FIFO", CLI_BOUND),
    Row("merge --markdown symlink", merge_summary_to_link, 2,
        r"--markdown.*summary\.md.*is a symbolic link", CLI_BOUND, intact),
    # 23.8
    Row("merge on a full disk", merge_on_a_full_disk, 2,
        r"cannot write merged\.json: File too large.*left as it was", CLI_BOUND,
        old_report_intact),
    Row("report and markdown one path", report_and_markdown_one_path, 4,
        r"--sglang-markdown.*out\.txt.*same file as --sglang-report.*give each output its own",
        PYTEST_BOUND, nothing_written),
    Row("junitxml and report one path", junit_and_report_one_path, 4,
        r"--sglang-report.*r\.xml.*same file as --junitxml", PYTEST_BOUND, nothing_written),
    # 24.2
    Row("pytest -l -vv shows server_info", locals_of_a_failing_test, 1,
        r"'admin_api_key': '\*\*\*'.*'api_key': '\*\*\*'", PYTEST_BOUND),
    # 24.3
    Row("server log of a launch", launched_with_a_key, 0, r"1 passed", PYTEST_BOUND,
        log_kept_without_the_key),
    # 24.4
    Row("header and api key", header_and_api_key, 4,
        r"--sglang-header: 'srv:Authorization=\*\*\*' and --sglang-api-key .*both set.*"
        r"Authorization.*give the key one way", PYTEST_BOUND),
    # 24.12
    Row("launch: command not executable", command_not_executable, 0,
        r"SKIPPED.*cannot launch profile 'srv'.*not executable.*command: .*serve --model-path",
        PYTEST_BOUND, launch_recorded(r"not executable")),
    Row("launch: pre-flight fails", too_few_gpus, 1,
        r"needs 2 GPUs.*command: .*--api-key \*\*\*", PYTEST_BOUND,
        launch_recorded(r"2 GPUs")),
    # 24.13
    Row("fake gpus.json missing a key", fake_gpus_missing_a_key, 4,
        r"sglang_gpu_fake: .*gpus\.json: gpus\[0\] has no 'total_mib'.*give", PYTEST_BOUND),
    Row("fake gpus.json not JSON", fake_gpus_not_json, 4,
        r"sglang_gpu_fake: .*gpus\.json: not valid JSON \(line 1", PYTEST_BOUND),
    Row("emulator: fake gpus.json wrong type", emulator_fake_gpus_wrong_type, 2,
        r"--emulator-gpu-dir: .*gpus\.json: gpus\[0\]\['total_mib'\] must be a whole number",
        CLI_BOUND),
]  # fmt: skip


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_hostile_input(row: Row, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Each bad input ends in its exit code and message, in time, with no secret shown."""
    verdict = row.run(tmp_path)
    # The figures, row by row: JUnit XML properties under -o junit_family=xunit1.
    request.node.user_properties += [
        ("exit_code", verdict.rc), ("time_to_verdict_s", round(verdict.seconds, 2))
    ]  # fmt: skip
    assert verdict.rc == row.exit, verdict.output
    assert re.search(row.message, verdict.output, re.DOTALL), verdict.output
    assert "Traceback" not in verdict.output and "INTERNALERROR" not in verdict.output
    assert verdict.seconds < row.bound, verdict.output
    if row.check is not None:
        row.check(tmp_path, verdict)
    kept = [p for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink()]
    for path in [p for p in kept if p.name != "pyproject.toml"]:  # the input holds them
        if path.stat().st_size < 10_000_000 and not path.name.endswith(".pyc"):
            text = path.read_bytes()
            assert not any(s.encode() in text for s in row.secrets), path
    assert not any(secret in verdict.output for secret in row.secrets), verdict.output
