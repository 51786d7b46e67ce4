#!/usr/bin/env python3
"""The real-SGLang tier's launch recipe: command line, environment, paths. Stdlib only.

The one place that says how the tier's real SGLang 0.5.23 server is started on a CPU-only
machine (see real_sglang/README.md for why each flag and variable is there)::

    python3 real_sglang/launch_profile.py                 # a shell command line (port 30111)
    python3 real_sglang/launch_profile.py --port 30222 --format json
    python3 real_sglang/launch_profile.py --format toml   # a [profiles.real-tiny] table
                                                          # for --sglang-profiles PATH
    python3 real_sglang/launch_profile.py --format spec-toml  # baseline / eagle3 /
                                             # eagle3-adaptive on the planted pair

Paths come from ``PYTEST_SGLANG_REAL_PYTHON`` and ``PYTEST_SGLANG_REAL_MODEL`` when set,
otherwise from the default cache of ``setup.sh``
(``${PYTEST_SGLANG_REAL_HOME:-~/.cache/pytest-sglang/real-sglang-0.5.23}/{venv,model}``).

Named ``launch_profile`` rather than ``profile`` so that running it as a script (which puts
this folder first on ``sys.path``) cannot shadow the standard library's ``profile`` module.
"""

# ruff: noqa: T201  (a command-line script: it prints)
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

SGLANG_VERSION = "0.5.23"
SERVED_MODEL_NAME = "tiny"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 30111

#: Environment of the server process (added to the caller's).
#: ``SGLANG_USE_CPU_ENGINE=1`` selects SGLang's CPU engine; an empty
#: ``CUDA_VISIBLE_DEVICES`` keeps the CUDA build of torch from looking for a GPU.
SERVER_ENV: Mapping[str, str] = {
    "SGLANG_USE_CPU_ENGINE": "1",
    "CUDA_VISIBLE_DEVICES": "",
}

#: Server flags, after ``--model-path`` / ``--host`` / ``--port`` (which the caller or the
#: plugin's launcher supplies).
SERVER_ARGS: tuple[str, ...] = (
    "--device", "cpu",
    "--attention-backend", "torch_native",
    "--sampling-backend", "pytorch",
    "--disable-cuda-graph",
    "--disable-overlap-schedule",
    "--max-total-tokens", "8192",
    "--mem-fraction-static", "0.05",
    "--grammar-backend", "none",
    "--enable-metrics",
    "--served-model-name", SERVED_MODEL_NAME,
    "--sleep-on-idle",
)  # fmt: skip


#: The plain flags with SGLang's ``intel_amx`` attention backend per phase instead of
#: ``torch_native``: speculative decoding's draft backends exist for ``intel_amx`` (not for
#: ``torch_native``), and ``--attention-backend intel_amx`` itself is rewritten to
#: ``torch_native`` on a CPU without AMX, while the per-phase flags are kept. The backend
#: calls the sgl_kernel stand-in's attention ops. Speculative servers and the baseline they
#: are compared with both use these (the two attention paths differ on bf16 near-ties).
_AT = SERVER_ARGS.index("--attention-backend")
AMX_ARGS: tuple[str, ...] = (
    *SERVER_ARGS[:_AT],
    "--prefill-attention-backend", "intel_amx",
    "--decode-attention-backend", "intel_amx",
    *SERVER_ARGS[_AT + 2 :],
)  # fmt: skip

#: The speculative profiles' flags (baseline and EAGLE3 alike): :data:`AMX_ARGS` with room for
#: the wide planted target's weights (SGLang refuses to start it with 0.05: the weights would
#: leave no KV cache; ``--max-total-tokens`` still caps the cache).
_MF = AMX_ARGS.index("--mem-fraction-static")
SPEC_ARGS: tuple[str, ...] = (*AMX_ARGS[: _MF + 1], "0.15", *AMX_ARGS[_MF + 2 :])

#: The speculative profiles' environment: :data:`SERVER_ENV` with one OpenMP thread. With two
#: threads on two shared cores, a thread that loses its core stalls every parallel region:
#: a 1-token decode step then took 3x as long, varying run to run (baseline at C=1: 15.3,
#: 11.8, 36.6 tok/s with two threads; 44.5, 42.7, 44.4 with one).
SPEC_ENV: Mapping[str, str] = {**SERVER_ENV, "OMP_NUM_THREADS": "1"}

#: EAGLE3 as the issue's trials ran it: 3 draft steps, top-k 1, 4 draft tokens.
EAGLE3_STEPS = 3


def eagle3_args(draft: str | os.PathLike[str], *, adaptive: bool = False) -> tuple[str, ...]:
    """Return the EAGLE3 flags for ``draft`` (``--speculative-adaptive`` when ``adaptive``)."""
    args = (
        "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", str(draft),
        "--speculative-num-steps", str(EAGLE3_STEPS),
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", str(EAGLE3_STEPS + 1),
    )  # fmt: skip
    return (*args, "--speculative-adaptive") if adaptive else args


def real_home(environ: Mapping[str, str] = os.environ) -> Path:
    """Return the tier's cache folder (``PYTEST_SGLANG_REAL_HOME`` or the default)."""
    home = environ.get("PYTEST_SGLANG_REAL_HOME")
    if home:
        return Path(home)
    return Path.home() / ".cache" / "pytest-sglang" / f"real-sglang-{SGLANG_VERSION}"


def real_python(environ: Mapping[str, str] = os.environ) -> Path:
    """Return the tier venv's python (``PYTEST_SGLANG_REAL_PYTHON`` or the default)."""
    value = environ.get("PYTEST_SGLANG_REAL_PYTHON")
    return Path(value) if value else real_home(environ) / "venv" / "bin" / "python"


def real_model(environ: Mapping[str, str] = os.environ) -> Path:
    """Return the tiny model's folder (``PYTEST_SGLANG_REAL_MODEL`` or the default)."""
    value = environ.get("PYTEST_SGLANG_REAL_MODEL")
    return Path(value) if value else real_home(environ) / "model"


def spec_models(environ: Mapping[str, str] = os.environ) -> Path:
    """Return the speculative pair's folder (``target/``, ``eagle3/``, ``plant.json``).

    ``PYTEST_SGLANG_REAL_SPEC_MODELS`` or ``<real home>/spec-wide``, which ``setup.sh`` builds
    with ``make_spec_models.py`` (named for the wide target, so that a checkout that builds
    another pair does not overwrite it).
    """
    value = environ.get("PYTEST_SGLANG_REAL_SPEC_MODELS")
    return Path(value) if value else real_home(environ) / "spec-wide"


def missing(environ: Mapping[str, str] = os.environ) -> str | None:
    """Return why the tier cannot run here (not set up...), or None when it can."""
    python, model = real_python(environ), real_model(environ)
    if not os.access(python, os.X_OK):
        return f"no real-SGLang python at {python} (run real_sglang/setup.sh)"
    if not (model / "config.json").is_file() or not (model / "tokenizer.json").is_file():
        return f"no tiny model at {model} (run real_sglang/setup.sh)"
    return None


def launch_command(
    python: str | os.PathLike[str] | None = None,
    model: str | os.PathLike[str] | None = None,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
) -> list[str]:
    """Return the argv that starts the server on ``host:port``."""
    return [
        str(python or real_python()),
        "-m",
        "sglang.launch_server",
        "--model-path",
        str(model or real_model()),
        "--host",
        host,
        "--port",
        str(port),
        *SERVER_ARGS,
    ]


def launch_env(base: Mapping[str, str] = os.environ) -> dict[str, str]:
    """Return the server's environment: ``base`` plus :data:`SERVER_ENV`."""
    return {**base, **SERVER_ENV}


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


#: What the tier's server resolves with these flags and the tiny model (vocabulary 32000,
#: max_position_embeddings 4096): ``/v1/models`` max_model_len, and the scheduler's request
#: limit (``/server_info`` reports ``max_running_requests`` as null: not given; the plugin's
#: identity check compares the effective value, see docs/emulator.md).
EXPECT = {"served_model_name": SERVED_MODEL_NAME, "max_model_len": 4096,
          "max_running_requests": 2048}  # fmt: skip


def profile_toml(
    name: str = "real-tiny",
    python: str | os.PathLike[str] | None = None,
    model: str | os.PathLike[str] | None = None,
) -> str:
    """Return a ``[profiles.NAME]`` table for the plugin's ``--sglang-profiles PATH``.

    The plugin's launcher adds ``--model-path``, ``--tp-size``, ``--host`` and ``--port``.
    """
    args = ", ".join(_toml_str(a) for a in SERVER_ARGS)
    env = ", ".join(f"{k} = {_toml_str(v)}" for k, v in SERVER_ENV.items())
    expect = ", ".join(f"{k} = {json.dumps(v)}" for k, v in EXPECT.items())
    return (
        f"[profiles.{name}]\n"
        f'command = [{_toml_str(str(python or real_python()))}, "-m", "sglang.launch_server"]\n'
        f"model-path = {_toml_str(str(model or real_model()))}\n"
        f"tp = 1\n"
        f"args = [{args}]\n"
        f"env = {{ {env} }}\n"
        f"expect = {{ {expect} }}\n"
    )


def spec_profiles_toml(
    python: str | os.PathLike[str] | None = None,
    models: str | os.PathLike[str] | None = None,
) -> str:
    """Return ``baseline``, ``eagle3`` and ``eagle3-adaptive`` profiles on the planted pair.

    The names are the example story's (``examples/test_story.py``). All three use the
    ``intel_amx`` backend and one OpenMP thread (:data:`SPEC_ARGS`, :data:`SPEC_ENV`); the
    readiness gate checks that EAGLE3 is on and, for the adaptive one, that SGLang kept
    adaptive speculation on (it silently falls back to static speculation where unsupported).
    """
    folder = Path(models or spec_models())
    command = f'[{_toml_str(str(python or real_python()))}, "-m", "sglang.launch_server"]'
    env = ", ".join(f"{k} = {_toml_str(v)}" for k, v in SPEC_ENV.items())
    expect = {"served_model_name": SERVED_MODEL_NAME, "max_model_len": 4096}
    tables = []
    for name, extra, more in (
        ("baseline", (), {}),
        ("eagle3", eagle3_args(folder / "eagle3"), {"speculative_algorithm": "EAGLE3"}),
        (
            "eagle3-adaptive",
            eagle3_args(folder / "eagle3", adaptive=True),
            {"speculative_algorithm": "EAGLE3", "speculative_adaptive": True},
        ),
    ):
        args = ", ".join(_toml_str(a) for a in (*SPEC_ARGS, *extra))
        shown = ", ".join(f"{k} = {json.dumps(v)}" for k, v in {**expect, **more}.items())
        tables.append(
            f"[profiles.{name}]\n"
            f"command = {command}\n"
            f"model-path = {_toml_str(str(folder / 'target'))}\n"
            f"tp = 1\n"
            f"args = [{args}]\n"
            f"env = {{ {env} }}\n"
            f"expect = {{ {shown} }}\n"
        )
    return "\n".join(tables)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default=DEFAULT_HOST)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--format", choices=("shell", "json", "toml", "spec-toml"), default="shell")
    parser.add_argument("--model", help="model folder (default: the tier's tiny model)")
    args = parser.parse_args(argv)
    argv_ = launch_command(model=args.model, host=args.host, port=args.port)
    if args.format == "json":
        print(json.dumps({"command": argv_, "env": dict(SERVER_ENV)}, indent=2))
    elif args.format == "toml":
        print(profile_toml(), end="")
    elif args.format == "spec-toml":
        print(spec_profiles_toml(), end="")
    else:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in SERVER_ENV.items())
        print(f"env {env} {shlex.join(argv_)}")
    why = missing()
    if why:
        print(f"note: {why}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
