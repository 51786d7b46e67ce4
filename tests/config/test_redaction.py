"""The one redaction rule (``config/redaction.py``) and the reprs that use it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sglang.config.profiles import Profile, load_profiles
from pytest_sglang.config.redaction import (
    MASK,
    Redactor,
    is_secret_name,
    redact,
    secret_flag_values,
)
from pytest_sglang.config.values import Sourced


@pytest.mark.parametrize(
    ("text", "hidden", "kept"),
    [
        # SGLang logs its arguments so: the key is inside a repr.
        (
            "server_args=ServerArgs(model_path='m', tokenizer_path='t', api_key='sk-plant-1', "
            "admin_api_key=None, max_total_num_tokens=1000, ssl_keyfile=None)",
            "sk-plant-1",
            ["tokenizer_path='t'", "admin_api_key=None", "max_total_num_tokens=1000"],
        ),
        (
            "python -m sglang.launch_server --api-key sk-plant-2 --port 1",
            "sk-plant-2",
            ["--port 1"],
        ),
        ("cmd --api-key=sk-plant-3 --tp 8", "sk-plant-3", ["--api-key=***", "--tp 8"]),
        ("cmd --admin-api-key adm-plant-4", "adm-plant-4", ["--admin-api-key ***"]),
        ("['--api-key', 'sk-plant-5', '--tp', '1']", "sk-plant-5", ["'--tp', '1'"]),
        ("{'HF_TOKEN': 'hf_plant6', 'NCCL_P2P_DISABLE': '1'}", "hf_plant6", ["'1'"]),
        ("HF_TOKEN=hf_plant7 OTHER=1", "hf_plant7", ["OTHER=1"]),
        ("http://user:pw-plant-8@h:30000/v1", "pw-plant-8", ["http://***@h:30000/v1"]),
        ("Authorization: Bearer sk-plant-9", "sk-plant-9", ["Bearer ***"]),
        ('"api_key": "sk-plant-10", "max_model_len": 5', "sk-plant-10", ['"max_model_len": 5']),
        ("DB_PASSWORD=plant11 AWS_SECRET_ACCESS_KEY=plant12x", "plant11", ["***"]),
    ],
)
def test_every_form_of_a_secret_is_hidden(text: str, hidden: str, kept: list[str]) -> None:
    out = redact(text)
    assert hidden not in out
    assert MASK in out
    for part in kept:
        assert part in out, out


def test_known_secrets_are_hidden_anywhere() -> None:
    out = redact("the server said: key abcd1234 is invalid", ["abcd1234"])
    assert out == "the server said: key *** is invalid"
    # Too short to search for as text (it would blank digits everywhere): patterns only.
    assert redact("port 1", ["1"]) == "port 1"


def test_messages_naming_the_options_are_not_mangled() -> None:
    text = (
        "phase 'health' failed: pass the key with --sglang-api-key or PYTEST_SGLANG_API_KEY "
        "(from --sglang-api-key on the command line); no_such_key: expected 1; KEY=VALUE"
    )
    assert redact(text) == text


def test_secret_names() -> None:
    for name in (
        "HF_TOKEN", "OPENAI_API_KEY", "api_key", "apiKey", "DB_PASSWORD", "my_secret",
        "--hf-token", "TOKEN_TIMEOUTS_FILE", "api_key_counter",
    ):  # fmt: skip
        assert is_secret_name(name), name
    for name in (
        "tokenizer_path", "max_total_num_tokens", "ssl_keyfile", "keyboard", "tp_size",
        "--sglang-first-token-timeout", "sglang_first_token_timeout", "KEY_LIMIT",
        "fingerprint_key", "sort_key", "--emulator-draft-per-token-ms", "time_per_token",
        "token_ms",
    ):  # fmt: skip
        assert not is_secret_name(name), name


def test_argv_and_json() -> None:
    argv = ["python", "-m", "x", "--api-key", "sk-a1", "--hf-token=hf_b2", "--tp", "8"]
    assert secret_flag_values(argv) == ["sk-a1", "hf_b2"]
    assert Redactor().argv(argv) == [
        "python", "-m", "x", "--api-key", MASK, "--hf-token=***", "--tp", "8",
    ]  # fmt: skip
    document = {"api_key": "sk-c3", "url": "http://u:p4ss@h:1", "runs": [{"e": "Bearer zz-d4"}]}
    assert Redactor().json(document) == {
        "api_key": MASK, "url": "http://***@h:1", "runs": [{"e": "Bearer ***"}],
    }  # fmt: skip
    assert repr(Redactor(["x" * 8])) == "Redactor(1 secrets)"


def test_reprs_shown_by_pytest_l_hide_secrets(tmp_path: Path) -> None:
    # pytest -l prints a failing test's locals: a profile, a settings value, the key.
    source = tmp_path / "profiles.toml"
    source.write_text(
        "[profiles.p]\nmodel-path = 'm'\nargs = ['--api-key', 'sk-profile-77']\n"
        "env = { HF_TOKEN = 'hf_profile_88', NCCL_P2P_DISABLE = '1' }\n"
    )
    profile: Profile = load_profiles(None, source)["p"]
    shown = repr(profile)
    assert "sk-profile-77" not in shown and "hf_profile_88" not in shown
    assert "NCCL_P2P_DISABLE" in shown and "'m'" in shown
    key = Sourced("sk-sourced-99", "--sglang-api-key on the command line", secret=True)
    assert "sk-sourced-99" not in repr(key) and "'***'" in repr(key)
    assert key.value == "sk-sourced-99"
