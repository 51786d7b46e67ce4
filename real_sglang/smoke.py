#!/usr/bin/env python3
"""End-to-end check of the real-SGLang tier: launch, gate, request, stop. Stdlib only.

Run after ``real_sglang/setup.sh`` (with any Python 3.10+)::

    python3 real_sglang/smoke.py                      # port 30111
    python3 real_sglang/smoke.py --crash-input-id 2000 --model DIR_OF_A_VOCAB_1024_MODEL

What it does, timing each step:

1. starts the server with :mod:`launch_profile`'s command and environment in a new process
   group (its output goes to a log file), with ``PYTEST_SGLANG_SGL_KERNEL_LOG`` set so the
   sgl_kernel stand-in records every process that imports it and every call;
2. polls ``GET /health_generate`` until it answers 200 (time to ready);
3. sends one ``/generate`` with ``input_ids``, one streamed ``/v1/completions`` and one
   streamed ``/v1/chat/completions``, and reads ``/metrics``;
4. SIGTERMs the process group, waits for every process of the group to be gone (SIGKILL
   after ``--stop-timeout``), and checks that none is left;
5. checks the stand-in's log: imported by the server's processes, called zero times.

With ``--crash-input-id N`` step 3 is one ``/generate`` with ``input_ids=[N]`` instead, and
the check is that the server exits by itself (an id >= the model's vocab_size kills it).
Exit status 0 when every check passed.
"""

# ruff: noqa: T201  (a command-line script: it prints)
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import launch_profile

FAILURES: list[str] = []


def say(msg: str) -> None:
    print(f"[smoke {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def check(ok: bool, what: str) -> None:
    say(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILURES.append(what)


def request(url: str, body: object | None = None, timeout: float = 60.0) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    if data:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def sse_events(raw: bytes) -> list[object]:
    """Return the ``data:`` payloads of an SSE body (``[DONE]`` as the string)."""
    events: list[object] = []
    for line in raw.decode().splitlines():
        if line.startswith("data:"):
            payload = line[5:].strip()
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def group_pids(pgid: int) -> list[int]:
    """Return the pids of live (non-zombie) processes in process group ``pgid``."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        state, pg = fields[0], int(fields[2])
        if pg == pgid and state != "Z":
            pids.append(int(entry))
    return pids


def alive(pid: int) -> bool:
    """Return whether ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def signal_name(code: int | None) -> str:
    """Return ``", SIGNAME"`` for a negative exit status, else ``""``."""
    return f", {signal.Signals(-code).name}" if code is not None and code < 0 else ""


def wait_ready(base: str, proc: subprocess.Popen[bytes], timeout: float) -> float | None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            return None
        try:
            status, _ = request(f"{base}/health_generate", timeout=10)
            if status == 200:
                return time.monotonic() - t0
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        time.sleep(0.25)
    return None


def exercise(base: str) -> None:
    status, body = request(
        f"{base}/generate",
        {
            "input_ids": [1000, 1001, 1002],
            "sampling_params": {"max_new_tokens": 8, "ignore_eos": True},
        },
    )
    out = json.loads(body) if status == 200 else {}
    check(
        status == 200 and len(out.get("output_ids", [])) == 8,
        f"/generate input_ids -> {status}, {len(out.get('output_ids', []))} output ids, "
        f"text {out.get('text', '')[:40]!r}",
    )

    status, body = request(
        f"{base}/v1/completions",
        {
            "model": "tiny",
            "prompt": "w1 w2 w3",
            "max_tokens": 8,
            "stream": True,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
        },
    )
    events = sse_events(body) if status == 200 else []
    usage = [e for e in events if isinstance(e, dict) and e.get("usage")]
    check(
        status == 200
        and events[-1:] == ["[DONE]"]
        and bool(usage)
        and usage[-1]["usage"]["completion_tokens"] == 8,
        f"/v1/completions stream -> {status}, {len(events)} events, "
        f"usage {usage[-1]['usage'] if usage else None}",
    )

    status, body = request(
        f"{base}/v1/chat/completions",
        {
            "model": "tiny",
            "messages": [{"role": "user", "content": "w5 w6 hello"}],
            "max_tokens": 8,
            "stream": True,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
        },
    )
    events = sse_events(body) if status == 200 else []
    content = "".join(
        (c.get("delta") or {}).get("content") or ""
        for e in events
        if isinstance(e, dict)
        for c in e.get("choices", [])
    )
    usage = [e for e in events if isinstance(e, dict) and e.get("usage")]
    check(
        status == 200 and events[-1:] == ["[DONE]"] and bool(content) and bool(usage),
        f"/v1/chat/completions stream -> {status}, {len(events)} events, content {content[:40]!r}, "
        f"usage {usage[-1]['usage'] if usage else None}",
    )

    status, body = request(f"{base}/metrics")
    names = {
        line.split("{")[0].split(" ")[0]
        for line in body.decode().splitlines()
        if line.startswith("sglang:")
    }
    check(
        status == 200 and len(names) > 10,
        f"/metrics -> {status}, {len(names)} sglang:* series names",
    )


def stop(proc: subprocess.Popen[bytes], timeout: float) -> None:
    pgid = proc.pid  # start_new_session: the leader's pid is the group id
    before = group_pids(pgid)
    say(f"SIGTERM to process group {pgid} ({len(before)} processes: {before})")
    t0 = time.monotonic()
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    while time.monotonic() - t0 < timeout and (proc.poll() is None or group_pids(pgid)):
        time.sleep(0.1)
    took = time.monotonic() - t0
    left = group_pids(pgid)
    if proc.poll() is None or left:
        say(f"still running after {took:.1f} s: {left}; SIGKILL to the group")
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)
        check(False, f"SIGTERM stopped the server within {timeout:.0f} s")
    else:
        check(
            True,
            f"SIGTERM stopped the whole group in {took:.1f} s "
            f"(leader exit {proc.returncode}{signal_name(proc.returncode)})",
        )
    left = [p for p in before if alive(p)] + group_pids(pgid)
    check(not left, f"no process of the group is left {left or ''}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default=launch_profile.DEFAULT_HOST)
    parser.add_argument("--port", type=int, default=launch_profile.DEFAULT_PORT)
    parser.add_argument("--model", help="model folder (default: the tier's tiny model)")
    parser.add_argument("--ready-timeout", type=float, default=300.0)
    parser.add_argument("--stop-timeout", type=float, default=60.0)
    parser.add_argument("--crash-input-id", type=int, help="send input_ids=[N]; expect a crash")
    parser.add_argument("--log", type=Path, help="server log file (default: a temporary file)")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="K=V",
        help="extra server environment (repeatable)",
    )
    args = parser.parse_args(argv)

    why = launch_profile.missing()
    if why:
        say(f"cannot run: {why}")
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="real-sglang-smoke-"))
    log_path = args.log or workdir / "server.log"
    kernel_log = workdir / "sgl_kernel_calls.log"
    cmd = launch_profile.launch_command(model=args.model, host=args.host, port=args.port)
    env = launch_profile.launch_env()
    env["PYTEST_SGLANG_SGL_KERNEL_LOG"] = str(kernel_log)
    env.update(kv.split("=", 1) for kv in args.env)
    say("env " + " ".join(f"{k}={v}" for k, v in launch_profile.SERVER_ENV.items()))
    say("launch: " + " ".join(cmd))
    say(f"server log: {log_path}")
    base = f"http://{args.host}:{args.port}"
    with open(log_path, "wb") as log:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        ready = wait_ready(base, proc, args.ready_timeout)
        if ready is None:
            check(False, f"ready within {args.ready_timeout:.0f} s (exit {proc.poll()})")
            print(log_path.read_text()[-4000:])
            return 1
        check(True, f"/health_generate 200 after {ready:.1f} s (from exec)")
        if args.crash_input_id is not None:
            t1 = time.monotonic()
            try:
                status, body = request(
                    f"{base}/generate",
                    {"input_ids": [args.crash_input_id], "sampling_params": {"max_new_tokens": 4}},
                    timeout=60,
                )
                say(f"/generate input_ids=[{args.crash_input_id}] -> {status} {body[:200]!r}")
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as err:
                say(f"/generate input_ids=[{args.crash_input_id}] -> {type(err).__name__}: {err}")
            try:
                code = proc.wait(60)
            except subprocess.TimeoutExpired:
                code = None
            check(
                code is not None,
                f"the server exited by itself {time.monotonic() - t1:.1f} s after the request "
                f"(exit {code}{signal_name(code)})",
            )
            lines = [
                ln
                for ln in log_path.read_text(errors="replace").splitlines()
                if "Error" in ln or "SIGQUIT" in ln or "exit" in ln.lower()
            ]
            for ln in lines[-8:]:
                say(f"  log: {ln[:200]}")
        else:
            exercise(base)
    finally:
        stop(proc, args.stop_timeout)
        say(f"total {time.monotonic() - t0:.1f} s")

    records = kernel_log.read_text().splitlines() if kernel_log.exists() else []
    imports = sorted({r.split()[1] for r in records if r.startswith("IMPORT ")})
    calls = [r for r in records if r.startswith("CALL ")]
    check(bool(imports), f"sgl_kernel stand-in imported by pids {imports}")
    check(not calls, f"sgl_kernel stand-in called {len(calls)} times {calls[:5]}")
    say("PASSED" if not FAILURES else f"FAILED: {FAILURES}")
    return 0 if not FAILURES else 1


if __name__ == "__main__":
    sys.exit(main())
