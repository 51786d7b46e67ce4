"""The per-server lock: across processes, reentrant within one, released by a crash too."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pytest_sglang.server.pool import ServerLocks, server_key

URL = "http://127.0.0.1:30000"

HOLDER = """
import sys
from pathlib import Path
from pytest_sglang.server.pool import ServerLocks

locks = ServerLocks(Path(sys.argv[1]), owner="worker gw1, pid 4242")
with locks.hold(sys.argv[2], during="test_x.py::test_sweep"):
    print("held", flush=True)
    sys.stdin.read()  # until the parent closes it, or kills us
"""


def _is_free(folder: Path, url: str) -> bool:
    fd = os.open(folder / f"{server_key(url)}.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


@pytest.mark.parametrize("ends", ["releases", "is killed"])
def test_a_second_process_waits_for_the_holder_and_says_whom(tmp_path: Path, ends: str) -> None:
    said: list[str] = []
    took: list[bool] = []
    waiting, let_go = threading.Event(), threading.Event()

    def progress(line: str) -> None:
        said.append(line)
        waiting.set()

    locks = ServerLocks(tmp_path, progress=progress)
    command = [sys.executable, "-c", HOLDER, str(tmp_path), URL]
    pipe = subprocess.PIPE
    with subprocess.Popen(command, stdin=pipe, stdout=pipe, text=True) as holder:
        assert holder.stdin is not None and holder.stdout is not None
        try:
            assert holder.stdout.readline() == "held\n"

            def measure() -> None:
                with locks.hold(URL + "/"):  # the same server, spelt otherwise
                    took.append(let_go.is_set())

            thread = threading.Thread(target=measure)
            thread.start()
            assert waiting.wait(30), "the waiting process never said it waits"
            assert took == []  # still waiting: the holder has not let go
            let_go.set()
            if ends == "releases":
                holder.stdin.close()
            else:
                holder.send_signal(signal.SIGKILL)
            thread.join(30)
            assert not thread.is_alive()
            assert took == [True]  # taken only once the holder had let go
        finally:
            if holder.poll() is None:
                holder.kill()
    assert said == [
        f"sglang: waiting for the server at {URL}/: worker gw1, pid 4242 in "
        "test_x.py::test_sweep is measuring it (one measurement of a server at a time, "
        "across pytest-xdist workers)"
    ]


def test_holds_nest_in_one_process_and_release_at_the_end(tmp_path: Path) -> None:
    other = "http://127.0.0.1:30001"
    locks = ServerLocks(tmp_path)
    with locks.hold(URL, other):
        with locks.hold(URL):  # a comparison measures each of the servers it holds
            assert not _is_free(tmp_path, URL)
        assert not _is_free(tmp_path, URL) and not _is_free(tmp_path, other)
    assert _is_free(tmp_path, URL) and _is_free(tmp_path, other)


def test_urls_name_one_server_however_spelt() -> None:
    assert server_key("http://LOCALHOST:80/") == server_key("http://localhost")
    assert server_key("http://h:1") != server_key("http://h:2")
    assert server_key("http://h/v1") != server_key("http://h/v2")
