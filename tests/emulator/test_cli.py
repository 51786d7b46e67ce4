"""The command line and server-args resolution, in process (no server started)."""

from __future__ import annotations

import pytest

from pytest_sglang.emulator.config import faults
from pytest_sglang.emulator.config.cli import parse_args
from pytest_sglang.emulator.config.server_args import ServerArgsError

MODEL = ["--model-path", "org/Llama-3.1-8B-Instruct"]


def test_defaults_follow_sglang() -> None:
    config = parse_args(MODEL)
    args = config.server_args
    assert args["host"] == "127.0.0.1"
    assert args["port"] == 30000
    assert args["tp_size"] == 1
    assert args["dp_size"] == 1
    assert args["served_model_name"] == args["model_path"] == "org/Llama-3.1-8B-Instruct"
    assert args["tokenizer_path"] == "org/Llama-3.1-8B-Instruct"
    # As the real 0.5.23 server: null unless given (the effective values live elsewhere).
    assert args["context_length"] is None
    assert config.context_length == 131072
    assert args["max_running_requests"] is None
    assert args["speculative_algorithm"] is None
    assert args["enable_metrics"] is False
    assert args["skip_server_warmup"] is False
    assert args["log_level"] == "info"
    assert isinstance(args["mem_fraction_static"], float)
    assert "cuda_graph_max_bs" not in args
    assert args["cuda_graph_max_bs_decode"] is None  # 0.5.23: cuda_graph_config has the sizes
    assert args["cuda_graph_config"]["decode"]["max_bs"] == 256
    assert config.options.version == "0.5.23"
    assert config.options.decode_ms == 10.0
    assert config.options.prefill_ms == 10.0


def test_aliases_and_abbreviations() -> None:
    args = parse_args(["--model", "m", "--tp", "8", "--dp", "2"]).server_args
    assert (args["model_path"], args["tp_size"], args["dp_size"]) == ("m", 8, 2)
    args = parse_args(["--model-path", "m", "--tensor-parallel-size", "4"]).server_args
    assert args["tp_size"] == 4


def test_unknown_flags_are_reflected_with_coercion() -> None:
    args = parse_args(
        [
            *MODEL,
            "--my-flag",
            "7",
            "--ratio=0.5",
            "--enable-thing",
            "--name",
            "x",
            "--sizes",
            "1",
            "2",
            "4",
            "--off",
            "False",
            "--neg",
            "-3",
        ]
    ).server_args
    assert args["my_flag"] == 7
    assert args["ratio"] == 0.5
    assert args["enable_thing"] is True
    assert args["name"] == "x"
    assert args["sizes"] == [1, 2, 4]
    assert args["off"] is False
    assert args["neg"] == -3


def test_known_flags_win_over_generic_spellings() -> None:
    args = parse_args([*MODEL, "--tp-size", "2", "--tp_size", "5"]).server_args
    assert args["tp_size"] == 2


def test_speculative_resolution_caps_running_requests_at_48() -> None:
    config = parse_args([*MODEL, "--speculative-algorithm", "eagle3"])
    args = config.server_args
    assert args["speculative_algorithm"] == "EAGLE3"
    assert args["max_running_requests"] == 48
    assert any("reset to 48" in warning for warning in config.warnings)
    # Llama targets get SGLang's (5, 4, 8) triple when the steps are not given.
    triple = (5, 4, 8)
    assert (
        args["speculative_num_steps"],
        args["speculative_eagle_topk"],
        args["speculative_num_draft_tokens"],
    ) == triple


def test_explicit_max_running_requests_is_kept_under_speculation() -> None:
    args = parse_args(
        [*MODEL, "--speculative-algorithm", "EAGLE", "--max-running-requests", "64"]
    ).server_args
    assert args["max_running_requests"] == 64


def test_nextn_is_eagle_and_deepseek_gets_3_1_4() -> None:
    args = parse_args(
        ["--model-path", "deepseek-ai/DeepSeek-V3", "--speculative-algorithm", "NEXTN"]
    ).server_args
    assert args["speculative_algorithm"] == "EAGLE"
    assert (args["speculative_num_steps"], args["speculative_eagle_topk"]) == (3, 1)
    assert args["speculative_num_draft_tokens"] == 4


def test_topk_one_forces_draft_tokens_to_steps_plus_one() -> None:
    config = parse_args(
        [
            *MODEL,
            "--speculative-algorithm",
            "EAGLE3",
            "--speculative-num-steps",
            "3",
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            "8",
        ]
    )
    assert config.server_args["speculative_num_draft_tokens"] == 4
    assert any("adjusted" in warning for warning in config.warnings)


def test_topk_without_steps_is_rejected() -> None:
    with pytest.raises(ServerArgsError, match="AssertionError"):
        parse_args([*MODEL, "--speculative-algorithm", "EAGLE", "--speculative-eagle-topk", "4"])


def test_context_length_si_suffix_in_new_version() -> None:
    assert parse_args([*MODEL, "--context-length", "8k"]).server_args["context_length"] == 8000
    config = parse_args([*MODEL, "--emulator-model-context-length", "262144"])
    assert config.server_args["context_length"] is None
    assert config.context_length == 262144


def test_old_version_has_cuda_graph_max_bs() -> None:
    args = parse_args([*MODEL, "--emulator-version", "0.5.5", "--cuda-graph-max-bs", "128"])
    assert args.server_args["cuda_graph_max_bs"] == 128
    assert "cuda_graph_max_bs_decode" not in args.server_args
    assert args.options.version == "0.5.5"


def test_new_version_rejects_cuda_graph_max_bs_as_ambiguous(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args([*MODEL, "--cuda-graph-max-bs", "256"])
    assert exit_info.value.code == 2
    assert (
        "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
        "--cuda-graph-max-bs-prefill" in capsys.readouterr().err
    )


def test_model_path_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--tp", "2"])
    assert exit_info.value.code == 2
    assert "--model-path" in capsys.readouterr().err


def test_stray_positional_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args([*MODEL, "stray"])
    assert "unrecognized arguments: stray" in capsys.readouterr().err


def test_misspelled_emulator_option_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args([*MODEL, "--emulator-lode-time", "3"])
    assert "--emulator-lode-time" in capsys.readouterr().err


def test_unknown_fault_lists_valid_names(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args([*MODEL, "--emulator-fault", "explode"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "unknown fault 'explode'" in err
    for name in ("malformed-models", "never-ready", "crash-in-warmup", "hang"):
        assert name in err


def test_fault_values() -> None:
    options = parse_args(
        [*MODEL, "--emulator-fault", "context-length-mismatch=4096", "--emulator-fault", "hang"]
    ).options
    assert options.faults.value("context-length-mismatch") == 4096
    assert "hang" in options.faults
    assert "never-ready" not in options.faults
    assert (
        parse_args([*MODEL, "--emulator-fault", "context-length-mismatch"]).options.faults.value(
            "context-length-mismatch"
        )
        == 2048
    )


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("hang=3", "takes no value"),
        ("context-length-mismatch=0", "expected an integer >= 1"),
    ],
)
def test_bad_fault_values(flag: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args([*MODEL, "--emulator-fault", flag])
    assert message in capsys.readouterr().err


def test_fault_registry_rejects_unregistered_names_at_hook_sites() -> None:
    active = faults.Faults({"hang": None})
    with pytest.raises(KeyError, match="no fault named 'hnag'"):
        _ = "hnag" in active
    assert set(faults.registered()) >= {
        "malformed-models",
        "never-ready",
        "crash-in-warmup",
        "context-length-mismatch",
        "hang",
    }


def test_launch_command_redacts_api_keys() -> None:
    config = parse_args([*MODEL, "--api-key", "sk-secret", "--tp", "2"])
    assert "sk-secret" not in config.launch_command
    assert config.launch_command.endswith("--api-key '<redacted>' --tp 2")
    assert config.server_args["api_key"] == "sk-secret"


@pytest.mark.parametrize("flag", ["--emulator-load-time", "--emulator-decode-ms"])
def test_negative_timings_are_rejected(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args([*MODEL, flag, "-1"])
    assert "must be >= 0" in capsys.readouterr().err


def test_help_lists_emulator_options_and_faults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for text in (
        "--emulator-version",
        "--emulator-load-time",
        "--emulator-fault",
        "crash-in-warmup",
        "--speculative-algorithm",
    ):
        assert text in out
