#!/usr/bin/env bash
# Print `export` lines for the real-SGLang tier, once real_sglang/setup.sh has completed:
#
#     eval "$(real_sglang/env.sh)"     # then: pytest ... (tests read these two variables)
#
# PYTEST_SGLANG_REAL_PYTHON  the tier venv's python (sglang 0.5.23, the sgl_kernel stand-in)
# PYTEST_SGLANG_REAL_MODEL   the tiny random-weight Llama (vocab 32000)
#
# Prints nothing and exits 1 (with the reason on stderr) when the tier is not set up.
# Honours PYTEST_SGLANG_REAL_HOME like setup.sh.
set -euo pipefail
REAL_HOME=${PYTEST_SGLANG_REAL_HOME:-$HOME/.cache/pytest-sglang/real-sglang-0.5.23}
PY=$REAL_HOME/venv/bin/python
MODEL=$REAL_HOME/model
if [[ ! -f $REAL_HOME/venv/.pytest-sglang-venv.sha256 || ! -x $PY ]]; then
    echo "env.sh: the real-SGLang venv is not set up in $REAL_HOME (run real_sglang/setup.sh)" >&2
    exit 1
fi
if [[ ! -f $MODEL/.pytest-sglang-model.sha256 ]]; then
    echo "env.sh: no tiny model in $MODEL (run real_sglang/setup.sh)" >&2
    exit 1
fi
printf 'export PYTEST_SGLANG_REAL_PYTHON=%q\n' "$PY"
printf 'export PYTEST_SGLANG_REAL_MODEL=%q\n' "$MODEL"
