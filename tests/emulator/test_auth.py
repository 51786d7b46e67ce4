"""``--api-key``: 401 without the key, exempt paths, scheme handling per version (§1.11)."""

from __future__ import annotations

import pytest

from pytest_sglang.testing import EmulatorProcess
from tests.emulator.conftest import Shared, client

KEY = "sk-emulated"


@pytest.fixture
def keyed(shared_emulator: Shared) -> EmulatorProcess:
    return shared_emulator("--api-key", KEY, "--enable-metrics")


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": KEY},
        {"Authorization": f"Basic {KEY}"},
    ],
)
def test_missing_or_wrong_key_is_401(keyed: EmulatorProcess, headers: dict[str, str]) -> None:
    with client(keyed, headers=headers) as http:
        for method, path in (
            ("GET", "/v1/models"),
            ("GET", "/server_info"),
            ("POST", "/generate"),
            ("GET", "/no-such-path"),
        ):
            response = http.request(method, path, json={"text": "x"})
            assert response.status_code == 401, path
            assert response.json() == {"error": "Unauthorized"}


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
def test_right_key_passes_with_any_scheme_case(keyed: EmulatorProcess, scheme: str) -> None:
    with client(keyed, headers={"Authorization": f"{scheme} {KEY}"}) as http:
        assert http.get("/v1/models").status_code == 200
        generated = http.post(
            "/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 1}}
        )
        assert generated.status_code == 200


def test_exempt_paths(keyed: EmulatorProcess) -> None:
    with client(keyed) as http:
        for path in ("/health", "/health_generate", "/ready", "/metrics"):
            assert http.get(path).status_code == 200, path
        preflight = http.options(
            "/v1/models",
            headers={"Origin": "http://example.test", "Access-Control-Request-Method": "GET"},
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] in ("*", "http://example.test")


def test_warmup_sent_the_key(keyed: EmulatorProcess) -> None:
    # The fixture waited for the ready line, which needs the warm-up's authorised requests.
    assert '"POST /generate HTTP/1.1" 200' in keyed.log()


def test_old_version_compares_the_header_exactly(shared_emulator: Shared) -> None:
    old = shared_emulator("--api-key", KEY, "--emulator-version", "0.5.5")
    with client(old) as http:
        assert http.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
        lower = http.get("/v1/models", headers={"Authorization": f"bearer {KEY}"})
        assert lower.status_code == 401
        assert http.get("/health").status_code == 200
