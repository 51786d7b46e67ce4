"""The option catalogue: every option's flag, ini key, environment variable and help text.

Every option exists three times with one help text: ``--sglang-NAME`` on the command line,
``sglang_NAME`` in the ini file and ``PYTEST_SGLANG_NAME`` in the environment (never
``SGLANG_*``, which SGLang itself reads).
"""

from __future__ import annotations

from dataclasses import dataclass

from pytest_sglang.config.defaults import (
    DEFAULT_FIRST_TOKEN_TIMEOUT,
    DEFAULT_MAX_CONSECUTIVE_FAILURES,
    DEFAULT_READY_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_STALL_TIMEOUT,
)

__all__ = ["OPTIONS", "OptionSpec"]


@dataclass(frozen=True)
class OptionSpec:
    """One plugin option: its CLI flag, ini key, environment variable and help text."""

    name: str
    help: str
    metavar: str | None = None
    repeatable: bool = False
    flag: bool = False
    #: The value of the flag given alone (``--sglang-compare`` means ``latest``).
    const: str | None = None

    @property
    def cli(self) -> str:
        """The command-line flag, e.g. ``--sglang-url``."""
        return f"--sglang-{self.name}"

    @property
    def dest(self) -> str:
        """The ``config.option`` attribute the flag is stored in."""
        return "sglang_" + self.name.replace("-", "_")

    @property
    def ini(self) -> str:
        """The ini key, e.g. ``sglang_url``."""
        return self.dest

    @property
    def env(self) -> str:
        """The environment variable, e.g. ``PYTEST_SGLANG_URL``."""
        return "PYTEST_" + self.dest.upper()


# Help texts follow xdist's rule: capitalised, no final period, and are shared by the CLI
# flag and the ini key so the two never drift apart.
URL = OptionSpec(
    "url",
    "Attach to a running SGLang server: URL or NAME=URL (repeatable; NAME is what "
    "@pytest.mark.sglang_profile(NAME) selects, 'default' when omitted). A URL written "
    "openai+http://HOST:PORT declares a plain OpenAI-compatible server (vLLM, llama.cpp, "
    "TGI...): its gate checks /health or /v1/models only, and it is measured on the OpenAI "
    "endpoints. Env PYTEST_SGLANG_URL: whitespace-separated list",
    metavar="[NAME=][openai+]URL",
    repeatable=True,
)
HEADER = OptionSpec(
    "header",
    "HTTP header sent with every request to a server: [NAME:]HEADER=VALUE (repeatable; "
    "without NAME: to every server), e.g. vllm:Authorization=Bearer KEY. Values are treated "
    "as secrets and never printed. Env PYTEST_SGLANG_HEADER: whitespace-separated (quote "
    "values with spaces)",
    metavar="[NAME:]HEADER=VALUE",
    repeatable=True,
)
READY_TIMEOUT = OptionSpec(
    "ready-timeout",
    "Seconds to wait for a server to pass the readiness gate (suffixes ms, s, m, h "
    f"accepted). Default: {DEFAULT_READY_TIMEOUT:g}s",
    metavar="SECONDS",
)
API_KEY = OptionSpec(
    "api-key",
    "API key the server was started with (--api-key); sent as 'Authorization: Bearer KEY' "
    "and never printed",
    metavar="KEY",
)
REQUIRE = OptionSpec(
    "require",
    "Fail, instead of skip, tests whose server or GPU is not available "
    "(ini/env: true/false). Default: false",
    flag=True,
)
EXPECT = OptionSpec(
    "expect",
    "Identity the readiness gate checks: [NAME:]KEY=VALUE (repeatable). KEY is model_id, "
    "max_model_len or any /server_info key such as tp_size or speculative_algorithm; VALUE "
    "is JSON (8, true, null) or a plain string. Env PYTEST_SGLANG_EXPECT: whitespace-separated",
    metavar="[NAME:]KEY=VALUE",
    repeatable=True,
)

PROFILES = OptionSpec(
    "profiles",
    "TOML file of server profiles ([profiles.NAME] tables with model-path, tp, args, env, "
    "expect, extends, command); profiles may also live in pyproject.toml under "
    "[tool.pytest-sglang.profiles.NAME]",
    metavar="PATH",
)
LAUNCHER = OptionSpec(
    "launcher",
    "What launches a profile's server: 'sglang' (python -m sglang.launch_server, or the "
    "profile's command) or 'emulator' (python -m pytest_sglang.emulator, same arguments; "
    "no GPU needed). Default: sglang",
    metavar="{sglang,emulator}",
)
EMULATOR_ARGS = OptionSpec(
    "emulator-args",
    "Extra arguments for the emulator only, appended to every profile's command line under "
    "--sglang-launcher=emulator (e.g. '--emulator-speedup 50 --emulator-accept-length 1.2'); "
    "profiles keep real SGLang flags only",
    metavar="ARGS",
)
GPU_HOST = OptionSpec(
    "gpu-host",
    "Read GPU state with nvidia-smi over ssh on this host (user@host, BatchMode) instead of "
    "NVML on this machine; use it when the server runs elsewhere",
    metavar="[USER@]HOST",
)
GPU_FAKE = OptionSpec(
    "gpu-fake",
    "Read GPU state from a fake-GPU directory (gpus.json plus holder files the emulator "
    "writes) instead of NVML: for dry runs and the plugin's own tests",
    metavar="DIR",
)

REQUEST_TIMEOUT = OptionSpec(
    "request-timeout",
    "Seconds one request of a measurement (sglang_bench) may take in all before it is "
    "recorded as a failed request (suffixes ms, s, m, h accepted). "
    f"Default: {DEFAULT_REQUEST_TIMEOUT:g}s",
    metavar="SECONDS",
)
STALL_TIMEOUT = OptionSpec(
    "stall-timeout",
    "Seconds a streamed request of a measurement may go without a new token, once its first "
    "event arrived (whatever phase: after a role chunk, between tokens, after the finish "
    "chunk without [DONE]), before it is recorded as failed (stalled); the wait for the "
    "first event may be a queue (see --sglang-first-token-timeout). "
    f"Default: {DEFAULT_STALL_TIMEOUT:g}s",
    metavar="SECONDS",
)
FIRST_TOKEN_TIMEOUT = OptionSpec(
    "first-token-timeout",
    "Seconds a streamed request of a measurement may wait for its first token while the "
    "whole run receives no token at all (a frozen server), before it is recorded as failed; "
    "a request queued while others stream waits on (suffixes ms, s, m, h accepted). "
    f"Default: {DEFAULT_FIRST_TOKEN_TIMEOUT:g}s",
    metavar="SECONDS",
)
MAX_CONSECUTIVE_FAILURES = OptionSpec(
    "max-consecutive-failures",
    "Requests in a row of a measurement that may end without an answer (a transport "
    "failure or a timeout; an HTTP error is an answer) before the run stops and fails "
    "saying the server stopped answering; 0 never stops early. "
    f"Default: {DEFAULT_MAX_CONSECUTIVE_FAILURES}",
    metavar="N",
)

# Past one client process (docs/scaling.md).
LOAD_WORKERS = OptionSpec(
    "load-workers",
    "Load-generator processes per measurement run: N worker processes on this host (or N "
    "Ray actors with --sglang-ray-address), each its own event loop and connections, sharing "
    "one closed loop exactly (C in flight in total) with a common start and one merged set "
    "of records; use it when a run is flagged client_bound. Default: 1",
    metavar="N",
)
RAY_ADDRESS = OptionSpec(
    "ray-address",
    "Run the load-generator workers as Ray actors on the Ray cluster at ADDRESS (its head's "
    "HOST:PORT, or 'auto' for the cluster this host belongs to), spread over its nodes; "
    "needs pip install 'pytest-sglang[ray]' on every node. Default: none (this host only)",
    metavar="HOST:PORT",
)

INCONCLUSIVE = OptionSpec(
    "inconclusive",
    "What an inconclusive verdict (assert_faster, assert_at_least, assert_slo... whose runs "
    "cannot decide) does to its test: 'fail' (raise Inconclusive), 'skip' (skip the test) or "
    "'warn' (a warning; the test goes on); the report says inconclusive either way. "
    "Default: fail",
    metavar="{fail,skip,warn}",
)

SHARD = OptionSpec(
    "shard",
    "Run shard K of N of the suite (1/2 on one CI runner, 2/2 on another): the tests of a "
    "profile, and the profiles a test compares (sglang_profile, sglang_measure), all go to "
    "one shard, so each profile is launched on one runner only; give every shard the same "
    "test files and selection, and merge their --sglang-report files with "
    "'pytest-sglang merge' (docs/ci.md)",
    metavar="K/N",
)

REPORT = OptionSpec(
    "report",
    "Write the results (environment, servers, measurements with every run, verdicts with "
    "their evidence) as JSON to PATH; the format is the versioned JSON Schema "
    "pytest_sglang/schemas/report.schema.json",
    metavar="PATH",
)

MARKDOWN = OptionSpec(
    "markdown",
    "Append the results (tables and verdicts) as Markdown to PATH at the end of the run, "
    "e.g. --sglang-markdown=$GITHUB_STEP_SUMMARY for a GitHub Actions job summary",
    metavar="PATH",
)

# Stored baselines (docs/baselines.md): twins of pytest-benchmark's --benchmark-save,
# --benchmark-autosave, --benchmark-storage, --benchmark-compare and --benchmark-compare-fail,
# which read the same way but judge whole runs with the verdicts' statistics.
SAVE = OptionSpec(
    "save",
    "Save this session's measurements (every run, with their fingerprint) to the storage "
    "under NAME, as pytest-benchmark's --benchmark-save does (file NNNN_NAME.json)",
    metavar="NAME",
)
AUTOSAVE = OptionSpec(
    "autosave",
    "Save this session's measurements under an automatic name (commit id and time), as "
    "pytest-benchmark's --benchmark-autosave does (ini/env: true/false). Default: false",
    flag=True,
)
STORAGE = OptionSpec(
    "storage",
    "Where baselines are saved and compared: file://PATH or "
    "elasticsearch+http[s]://host1,host2/index/doctype?project_name=NAME, pytest-benchmark's "
    "storage URIs (a plain path means file://PATH). Default: file://./.benchmarks",
    metavar="URI",
)
COMPARE = OptionSpec(
    "compare",
    "Compare every measurement with its stored counterpart of the same fingerprint: the "
    "newest one ('latest', the default when the flag is given alone), or the one in a saved "
    "session (number, save name, or path of a saved file or --sglang-report JSON)",
    metavar="REF",
    const="latest",
)
COMPARE_FAIL = OptionSpec(
    "compare-fail",
    "Fail the tests whose measurements regressed against the stored ones by more than PCT "
    "percent (repeatable; e.g. output_throughput:3, ttft_p99:10; a trailing percent sign is "
    "allowed): a non-inferiority verdict on whole runs (exact Mann-Whitney, Hodges-Lehmann "
    "bound); a session that compared nothing fails too, unless a term is nothing-compared:ok. "
    "Needs --sglang-compare",
    metavar="METRIC:PCT",
    repeatable=True,
)

OPTIONS: tuple[OptionSpec, ...] = (
    URL,
    HEADER,
    READY_TIMEOUT,
    API_KEY,
    REQUIRE,
    EXPECT,
    PROFILES,
    LAUNCHER,
    EMULATOR_ARGS,
    GPU_HOST,
    GPU_FAKE,
    REQUEST_TIMEOUT,
    STALL_TIMEOUT,
    FIRST_TOKEN_TIMEOUT,
    MAX_CONSECUTIVE_FAILURES,
    LOAD_WORKERS,
    RAY_ADDRESS,
    INCONCLUSIVE,
    SHARD,
    REPORT,
    MARKDOWN,
    SAVE,
    AUTOSAVE,
    STORAGE,
    COMPARE,
    COMPARE_FAIL,
)
