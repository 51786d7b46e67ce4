"""Command line: SGLang's launch flags plus the ``--emulator-*`` options.

Flags are parsed like ``python -m sglang.launch_server`` parses them: argparse with prefix
abbreviation, so ``--tp 8`` works and, when emulating 0.5.23, ``--cuda-graph-max-bs`` fails with
SGLang's "ambiguous option" error (exit 2). The flags clients care about are typed; any other
``--some-flag [value ...]`` is accepted generically (``--flag v`` -> ``flag: v`` with
int/float/bool coercion, bare ``--flag`` -> ``true``, several values -> a list) and shows up in
``/server_info``, as a real server's full flag set would.
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pytest_sglang.emulator.config import faults, perf_options
from pytest_sglang.emulator.config.model import guess_profile
from pytest_sglang.emulator.config.options import EmulatorOptions, LaunchConfig
from pytest_sglang.emulator.config.server_args import NEW_VERSION, VERSIONS, resolve

PROG = "python -m pytest_sglang.emulator"
DEFAULT_DECODE_MS = 10.0
_SECRET_FLAGS = frozenset({"--api-key", "--admin-api-key"})


def parse_args(argv: Sequence[str]) -> LaunchConfig:
    """Parse ``argv`` (without the program name) into a resolved launch configuration.

    :raises SystemExit: with code 2 on a usage error, as argparse does.
    :raises ServerArgsError: when SGLang would reject the combination of flags.
    """
    version = _preparse_version(argv)
    parser = build_parser(version)
    namespace, extras = parser.parse_known_args(list(argv))
    values = vars(namespace)
    given = {key: value for key, value in values.items() if not key.startswith("emulator_")}
    for key, value in parse_unknown_flags(extras, parser).items():
        given.setdefault(key, value)
    gpu_dir = values["emulator_gpu_dir"]
    if gpu_dir is not None and not (gpu_dir / "gpus.json").is_file():
        parser.error(f"argument --emulator-gpu-dir: no gpus.json in {gpu_dir}")
    if gpu_dir is not None:
        from pytest_sglang.emulator.config.gpu_file import read_gpus

        try:
            read_gpus(gpu_dir / "gpus.json")
        except ValueError as exc:
            parser.error(f"argument --emulator-gpu-dir: {exc}")
    raw_decode_ms = values["emulator_decode_ms"]
    decode_ms = DEFAULT_DECODE_MS if raw_decode_ms is None else float(raw_decode_ms)
    prefill_ms = values["emulator_prefill_ms"]
    options = EmulatorOptions(
        version=version,
        load_time=values["emulator_load_time"],
        warmup_time=values["emulator_warmup_time"],
        health_probe_time=values["emulator_health_probe_time"],
        decode_ms=decode_ms,
        prefill_ms=decode_ms if prefill_ms is None else float(prefill_ms),
        model_context_length=values["emulator_model_context_length"],
        accept_length=values["emulator_accept_length"],
        architecture=values["emulator_architecture"],
        gpu_dir=gpu_dir,
        faults=faults.Faults(dict(values["emulator_fault"] or [])),
        perf=perf_options.from_values(
            values,
            simple_timing=raw_decode_ms is not None or prefill_ms is not None,
            default_seed=perf_options.configuration_seed(given),
        ),
    )
    model = guess_profile(
        str(given["model_path"]), options.model_context_length, options.architecture
    )
    resolved = resolve(given, version, model)
    return LaunchConfig(
        server_args=resolved.args,
        options=options,
        model=model,
        launch_command=launch_command(argv),
        warnings=resolved.warnings,
    )


def build_parser(version: str = NEW_VERSION) -> argparse.ArgumentParser:
    """Return the argument parser for emulating SGLang ``version``."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Emulate an SGLang server (python -m sglang.launch_server) without GPUs: same "
            "flags, same HTTP API, deterministic fake tokens, injectable faults. Flags not "
            "listed here are accepted as --flag [value] and reflected in /server_info."
        ),
        epilog="faults (--emulator-fault NAME[=VALUE]):\n" + faults.help_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        # Only flags actually given reach the resolved args; SGLang's defaults come later.
        argument_default=argparse.SUPPRESS,
    )
    _add_sglang_flags(parser.add_argument_group("SGLang server arguments"), version)
    _add_emulator_options(parser.add_argument_group("emulator options"))
    perf_options.add_options(parser.add_argument_group("emulator performance model"))
    return parser


def _add_sglang_flags(group: argparse._ArgumentGroup, version: str) -> None:
    new = version == NEW_VERSION
    context_type: Callable[[str], int] = si_int if new else int
    flag = group.add_argument
    flag(
        "--model-path",
        "--model",
        dest="model_path",
        required=True,
        help="Model id or path; the served model id unless --served-model-name is given.",
    )
    flag("--tokenizer-path", help="Tokenizer path (default: the model path).")
    flag("--served-model-name", help="Model id served by /v1/models (default: the model path).")
    flag(
        "--tp-size",
        "--tensor-parallel-size",
        "--tp",
        dest="tp_size",
        type=int,
        help="Tensor parallelism (default 1).",
    )
    flag(
        "--dp-size",
        "--data-parallel-size",
        "--dp",
        dest="dp_size",
        type=int,
        help="Data parallelism: one internal_states entry per DP rank (default 1).",
    )
    flag(
        "--pp-size",
        "--pipeline-parallel-size",
        dest="pp_size",
        type=int,
        help="Pipeline parallelism (default 1).",
    )
    flag(
        "--ep-size",
        "--expert-parallel-size",
        dest="ep_size",
        type=int,
        help="Expert parallelism (default 1).",
    )
    flag("--host", help="Address to listen on (default 127.0.0.1).")
    flag("--port", type=int, help="Port to listen on (default 30000).")
    flag(
        "--context-length",
        type=context_type,
        help="Context length (default: the model's, see --emulator-model-context-length)"
        + ("; SI suffixes as in 0.5.23: 8k = 8000." if new else "."),
    )
    flag("--api-key", help="Require 'Authorization: Bearer KEY' on non-exempt endpoints.")
    if new:
        flag("--admin-api-key", help="Admin API key (reflected in /server_info only).")
    flag("--enable-metrics", action="store_true", help="Serve Prometheus text on /metrics.")
    flag(
        "--speculative-algorithm",
        type=str.upper,
        help="EAGLE, EAGLE3, NEXTN (= EAGLE), STANDALONE, NGRAM, ...",
    )
    flag(
        "--speculative-draft-model-path",
        "--speculative-draft-model",
        dest="speculative_draft_model_path",
        help="Draft model path.",
    )
    flag("--speculative-num-steps", type=int, help="Draft steps per verify.")
    flag("--speculative-eagle-topk", type=int, help="Draft top-k.")
    flag("--speculative-num-draft-tokens", type=int, help="Draft tokens per verify.")
    if new:
        flag(
            "--speculative-adaptive",
            action="store_true",
            help="Pick the draft steps per batch size (EAGLE/EAGLE3 at top-k 1; otherwise "
            "turned off with a warning).",
        )
        flag("--speculative-adaptive-config", help="JSON file of the adaptive step buckets.")
    flag(
        "--max-running-requests",
        type=int,
        help="Max requests decoding at once; overflow queues (48 under speculation if unset).",
    )
    flag("--max-total-tokens", type=int, help="KV-cache capacity in tokens.")
    flag("--chunked-prefill-size", type=int, help="Chunked prefill size.")
    flag("--mem-fraction-static", type=float, help="Static memory fraction.")
    flag("--attention-backend", help="Attention backend (default fa3).")
    flag("--decode-attention-backend", help="Decode attention backend.")
    flag("--prefill-attention-backend", help="Prefill attention backend.")
    if new:
        flag("--cuda-graph-max-bs-decode", type=int, help="Largest decode CUDA-graph batch.")
        flag("--cuda-graph-max-bs-prefill", type=int, help="Largest prefill CUDA-graph batch.")
    else:
        flag("--cuda-graph-max-bs", type=int, help="Largest CUDA-graph batch (removed in 0.5.23).")
    flag("--disable-cuda-graph", action="store_true", help="Disable CUDA graphs.")
    flag(
        "--skip-server-warmup",
        action="store_true",
        help="Skip the warm-up request: ready as soon as the port opens.",
    )
    flag("--log-level", type=str.lower, help="Log level (default info).")
    flag("--log-level-http", type=str.lower, help="Log level of the HTTP access log.")
    flag("--trust-remote-code", action="store_true", help="Trust remote code.")
    flag("--dtype", help="Model dtype (default auto).")
    flag("--kv-cache-dtype", help="KV-cache dtype (default auto).")
    flag("--quantization", help="Quantization method.")
    flag("--random-seed", type=int, help="Random seed.")
    flag("--page-size", type=int, help="KV-cache page size (default 1).")
    flag(
        "--stream-interval",
        type=int,
        help="Tokens per streamed chunk (default 1; chunks may carry more under speculation).",
    )
    flag(
        "--incremental-streaming-output",
        action="store_true",
        help="Native streaming sends text/output_ids deltas instead of cumulative values.",
    )
    flag(
        "--stream-response-default-include-usage",
        action="store_true",
        help="OpenAI streams end with a usage chunk even without stream_options.",
    )
    flag(
        "--enable-cache-report",
        action="store_true",
        help="usage.prompt_tokens_details reports cached tokens.",
    )
    flag(
        "--decode-log-interval",
        type=int,
        help="Decode iterations per 'Decode batch' log line and metrics window (default 40).",
    )
    flag("--disable-radix-cache", action="store_true", help="Disable the prefix cache.")
    flag("--enable-dp-attention", action="store_true", help="Enable DP attention.")
    flag(
        "--enable-flashinfer-allreduce-fusion",
        action="store_true",
        help="Enable FlashInfer all-reduce fusion" + (" (deprecated)." if new else "."),
    )
    flag("--weight-version", help="Weight version reported in meta_info (default 'default').")
    flag("--device", help="Device (default cuda).")


def _add_emulator_options(group: argparse._ArgumentGroup) -> None:
    option = group.add_argument
    option(
        "--emulator-version",
        choices=VERSIONS,
        default=NEW_VERSION,
        help="SGLang version whose HTTP surface to emulate: 0.5.23 (/server_info, "
        "/model_info, /ready; old names deprecated) or 0.5.5 (/get_server_info, "
        "/get_model_info only). Default %(default)s.",
    )
    option(
        "--emulator-load-time",
        type=seconds,
        default=2.0,
        metavar="SECONDS",
        help="How long the port stays closed (loading weights, capturing CUDA graphs). "
        "Default %(default)s.",
    )
    option(
        "--emulator-warmup-time",
        type=seconds,
        default=1.0,
        metavar="SECONDS",
        help="Time with the port open and /health* answering 503 before the warm-up "
        "request completes. Default %(default)s.",
    )
    option(
        "--emulator-health-probe-time",
        type=seconds,
        default=1.0,
        metavar="SECONDS",
        help="How long a healthy /health_generate (and /health) takes; SGLang's runs a "
        "1-token generation and answers after about 1 s. Default %(default)s.",
    )
    option(
        "--emulator-decode-ms",
        type=seconds,
        default=None,
        metavar="MS",
        help="Fixed time per generated token of the simple engine (default 10); giving it "
        "selects the simple engine unless --emulator-engine says otherwise.",
    )
    option(
        "--emulator-prefill-ms",
        type=seconds,
        default=None,
        metavar="MS",
        help="Time to the first token (prefill). Default: --emulator-decode-ms.",
    )
    option(
        "--emulator-model-context-length",
        type=positive_int,
        default=None,
        metavar="N",
        help="The model config's context length, used without --context-length. Default: "
        "read from MODEL_PATH/config.json when the model path is a local directory, else "
        "131072.",
    )
    option(
        "--emulator-accept-length",
        type=accept_length,
        default=2.0,
        metavar="F",
        help="Mean accepted tokens per verify step under speculative decoding (chunk sizes, "
        "spec_* meta_info). Default %(default)s.",
    )
    option(
        "--emulator-architecture",
        default=None,
        metavar="NAME",
        help="HF architecture of the emulated model (default: guessed from the model path, "
        "e.g. LlamaForCausalLM).",
    )
    option(
        "--emulator-gpu-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="A fake GPU directory (gpus.json) in which to register this process as holding "
        "GPU memory while it runs, for dry runs of GPU hygiene checks.",
    )
    option(
        "--emulator-fault",
        type=faults.parse_fault,
        action="append",
        default=None,
        metavar="NAME[=VALUE]",
        help="Inject a fault (repeatable): " + ", ".join(faults.registered()) + ".",
    )


def parse_unknown_flags(extras: Sequence[str], parser: argparse.ArgumentParser) -> dict[str, Any]:
    """Turn the flags argparse did not know into server args (see the module docstring)."""
    result: dict[str, Any] = {}
    index = 0
    while index < len(extras):
        token = extras[index]
        if not token.startswith("--") or len(token) == 2 or token.startswith("--emulator-"):
            parser.error(f"unrecognized arguments: {token}")
        name, has_value, inline = token[2:].partition("=")
        index += 1
        raw: list[str] = [inline] if has_value else []
        while not has_value and index < len(extras) and not _is_flag(extras[index]):
            raw.append(extras[index])
            index += 1
        key = name.replace("-", "_")
        if not raw:
            result[key] = True
        elif len(raw) == 1:
            result[key] = coerce(raw[0])
        else:
            result[key] = [coerce(item) for item in raw]
    return result


def _is_flag(token: str) -> bool:
    return token.startswith("-") and not _NUMBER.fullmatch(token)


_NUMBER = re.compile(r"-?\d+(\.\d*)?([eE][-+]?\d+)?")


def coerce(text: str) -> Any:
    """``"true"``/``"false"`` -> bool, integers -> int, other numbers -> float, else the text."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def si_int(text: str) -> int:
    """Parse an integer with an optional SI suffix, as 0.5.23 parses ``--context-length``.

    ``8k`` is 8000, not 8192.
    """
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgG]?)", text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}")
    scale = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}[match.group(2).lower()]
    return int(float(match.group(1)) * scale)


def seconds(text: str) -> float:
    """Parse a duration >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """Parse an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return value


def accept_length(text: str) -> float:
    """Parse a mean acceptance length >= 1 (1.0: speculation gains nothing)."""
    value = seconds(text)
    if value < 1.0:
        raise argparse.ArgumentTypeError(f"must be >= 1.0, got {text!r}")
    return value


def launch_command(argv: Sequence[str]) -> str:
    """Return the command line as ``/server_info`` reports it, API keys redacted."""
    shown: list[str] = []
    hide_next = False
    for arg in argv:
        name = arg.split("=", 1)[0]
        if hide_next:
            shown.append("<redacted>")
        elif name in _SECRET_FLAGS and "=" in arg:
            shown.append(f"{name}=<redacted>")
        else:
            shown.append(arg)
        hide_next = arg in _SECRET_FLAGS
    return f"{PROG} {shlex.join(shown)}"


def _preparse_version(argv: Sequence[str]) -> str:
    # The parser itself depends on the version (0.5.23 has no --cuda-graph-max-bs), so the
    # version is read first; a bad value is reported by the full parser's `choices`.
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--emulator-version", default=NEW_VERSION)
    known, _ = pre.parse_known_args(list(argv))
    version = str(known.emulator_version)
    return version if version in VERSIONS else NEW_VERSION
