"""Log signatures and the log tail a failure shows (issue 18)."""

from __future__ import annotations

from pytest_sglang.server.hints import exit_hint, hints_for, without_probes


def test_port_in_use_matches_whatever_the_case() -> None:
    # uvicorn says "address already in use", Python's OSError "Address already in use".
    uvicorn = (
        "ERROR:    [Errno 98] error while attempting to bind on address: address already in use"
    )
    python = "OSError: [Errno 98] Address already in use"
    for line in (uvicorn, python):
        (hint,) = hints_for([line])
        assert hint.startswith("the port was taken between the plugin picking it")


def test_probe_lines_are_left_out_of_the_tail() -> None:
    log = [
        '[t] INFO:     127.0.0.1:1 - "GET /ready HTTP/1.1" 503 Service Unavailable',
        '[t] INFO:     127.0.0.1:1 - "GET /health_generate HTTP/1.1" 503 Service Unavailable',
        "[t] Initialization failed. warmup error: boom",
        '[t] INFO:     127.0.0.1:1 - "GET /v1/models HTTP/1.1" 200 OK',
        '[t] INFO:     127.0.0.1:1 - "POST /generate HTTP/1.1" 500 Internal Server Error',
    ]
    kept, dropped = without_probes(log)
    assert dropped == 3
    assert kept == [log[2], log[4]]


def test_exit_codes_explain_how_the_server_ended() -> None:
    assert "SIGKILL" in (exit_hint(-9) or "")
    assert exit_hint(1) is None and exit_hint(None) is None and exit_hint(0) is None
