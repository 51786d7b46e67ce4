#!/usr/bin/env bash
# Set up the "real SGLang tier": a separate Python 3.11 virtualenv holding the unmodified
# sglang 0.5.23 wheel (CPU path), an import-time stand-in for sgl_kernel, and a tiny
# random-weight Llama model made locally. See real_sglang/README.md.
#
# Usage: real_sglang/setup.sh [--force] [--check]
#   --force   rebuild the virtualenv and the model even if they are complete
#   --check   run the import check again even if it passed before (~15-30 s)
#
# Environment:
#   PYTEST_SGLANG_REAL_HOME         where everything goes
#                                   (default: $HOME/.cache/pytest-sglang/real-sglang-0.5.23)
#   PYTEST_SGLANG_REAL_BASE_PYTHON  the interpreter that creates the venv (default: python3.11)
#
# Idempotent: the venv is reused while its marker file records the same hash of the pins
# (this script's pins + requirements.txt + the base Python's version); any change rebuilds
# it from scratch. The sgl_kernel stand-in is re-copied when its files change; the model
# is rebuilt when make_tiny_model.py or its arguments change. Only PyPI is contacted (pip
# also reads this machine's local wheel mirrors); nothing else is downloaded.
set -euo pipefail

T0=$EPOCHREALTIME
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REAL_HOME=${PYTEST_SGLANG_REAL_HOME:-$HOME/.cache/pytest-sglang/real-sglang-0.5.23}
VENV=$REAL_HOME/venv
MODEL=$REAL_HOME/model
BASE_PY=${PYTEST_SGLANG_REAL_BASE_PYTHON:-python3.11}

# The pins that are not in requirements.txt (they are installed in separate steps).
TORCH_PINS=(torch==2.14.1 torchvision==0.29.1)
SGLANG_PIN=sglang==0.5.23
MODEL_ARGS=(--vocab-size 32000)

FORCE=0
CHECK=0
for arg in "$@"; do
    case $arg in
        --force) FORCE=1 ;;
        --check) CHECK=1 ;;
        -h | --help) sed -n '2,20p' "$0"; exit 0 ;;
        *) echo "setup.sh: unknown argument: $arg" >&2; exit 2 ;;
    esac
done

elapsed() { awk -v a="$T0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
log() { printf '[real-sglang %6ss] %s\n' "$(elapsed)" "$*"; }
sha() { sha256sum | cut -d' ' -f1; }

mkdir -p "$REAL_HOME"
# One setup at a time per REAL_HOME (a second concurrent run waits, then finds it cached).
exec 9>"$REAL_HOME/.setup.lock"
flock 9

command -v "$BASE_PY" >/dev/null || { echo "setup.sh: $BASE_PY not found" >&2; exit 1; }
BASE_VERSION=$("$BASE_PY" -c 'import sys; print(sys.version.split()[0])')
case $BASE_VERSION in
    3.11.*) ;;
    *) echo "setup.sh: $BASE_PY is Python $BASE_VERSION; torch 2.14.1 wheels are used from" \
            "this machine's disk for Python 3.11 only" >&2; exit 1 ;;
esac

VENV_HASH=$({
    echo "python $BASE_VERSION"
    printf '%s\n' "${TORCH_PINS[@]}" "$SGLANG_PIN"
    cat "$HERE/requirements.txt"
} | sha)
VENV_MARKER=$VENV/.pytest-sglang-venv.sha256

# ---------------------------------------------------------------- the virtualenv
# pip's output less the warnings about this machine's local package mirrors
# ("Location 'file:///opt/...' is ignored"), which are noise here.
pip_install() {
    "$VENV/bin/python" -m pip --disable-pip-version-check --no-input install --quiet "$@" 2>&1 |
        { grep -v 'is ignored: it is neither a file nor a directory' || true; }
}

if [[ $FORCE == 0 && -f $VENV_MARKER && $(cat "$VENV_MARKER") == "$VENV_HASH" ]]; then
    log "venv: cached ($VENV)"
else
    if [[ -e $VENV ]]; then
        log "venv: new pins, --force or an unfinished build; removing $VENV"
        rm -rf "$VENV"
    fi
    log "venv: creating with $BASE_PY ($BASE_VERSION)"
    "$BASE_PY" -m venv "$VENV"
    # The default (CUDA) build: it imports fine without a GPU, and PyPI's torchvision
    # only works beside it (a +cpu torch makes torchvision fail on torchvision::nms).
    # requirements.txt doubles as constraints here: torch's own dependencies (sympy,
    # triton, nvidia-*...) resolve to the pinned versions too.
    log "venv: installing ${TORCH_PINS[*]} (~1.5-2 min, ~5.5 GB)"
    pip_install "${TORCH_PINS[@]}" -c "$HERE/requirements.txt"
    log "venv: installing requirements.txt (SGLang's runtime imports, all pinned)"
    pip_install -r "$HERE/requirements.txt"
    # sglang's declared dependencies pull CUDA-only packages (flashinfer, cutlass,
    # deep-ep, sglang-kernel...): install the wheel alone, after its runtime imports
    # (in this order pip prints no "sglang requires ..., which is not installed" errors).
    log "venv: installing $SGLANG_PIN --no-deps"
    pip_install --no-deps "$SGLANG_PIN"
    # pip check: only the packages left out on purpose may be missing, nothing may conflict.
    "$VENV/bin/python" -m pip check >"$REAL_HOME/pip-check.txt" 2>&1 || true
    if grep -v 'which is not installed' "$REAL_HOME/pip-check.txt" | grep -q .; then
        cat "$REAL_HOME/pip-check.txt" >&2
        echo "setup.sh: pip check found version conflicts (above)" >&2
        exit 1
    fi
    echo "$VENV_HASH" >"$VENV_MARKER"
    log "venv: installed"
fi

# ---------------------------------------------------------------- sgl_kernel stand-in
# Copied into the venv's site-packages (no .pth file, no PYTHONPATH at launch): the venv's
# python imports it however it is started (the server's subprocesses included).
SITE=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
STUB_SRC=$HERE/sgl_kernel_stub/sgl_kernel
STUB_HASH=$(cd "$STUB_SRC" && find . -name '*.py' | LC_ALL=C sort | xargs sha256sum | sha)
STUB_MARKER=$SITE/sgl_kernel/.pytest-sglang-stub.sha256
if [[ $FORCE == 0 && -f $STUB_MARKER && $(cat "$STUB_MARKER") == "$STUB_HASH" ]]; then
    log "sgl_kernel stand-in: cached"
else
    log "sgl_kernel stand-in: copying into $SITE"
    rm -rf "$SITE/sgl_kernel"
    mkdir -p "$SITE/sgl_kernel"
    (cd "$STUB_SRC" && find . -name '*.py' -print0 | xargs -0 cp --parents -t "$SITE/sgl_kernel")
    echo "$STUB_HASH" >"$STUB_MARKER"
fi

# ---------------------------------------------------------------- import check
# Once per (venv, stand-in) pair, or with --check: SGLang's CPU server modules import, with
# the stand-in providing every sgl_kernel name they need, and nothing calls it.
CHECK_HASH=$(printf '%s %s\n' "$VENV_HASH" "$STUB_HASH" | sha)
CHECK_MARKER=$VENV/.pytest-sglang-checked.sha256
if [[ $CHECK == 0 && -f $CHECK_MARKER && $(cat "$CHECK_MARKER") == "$CHECK_HASH" ]]; then
    log "import check: cached"
else
    log "import check: SGLang's CPU server modules (~15-30 s)"
    SGLANG_USE_CPU_ENGINE=1 CUDA_VISIBLE_DEVICES='' "$VENV/bin/python" -W ignore - <<'PY'
import importlib.metadata as md
import sys

import sgl_kernel
import torch, torchvision, transformers  # noqa: E401
# The server's import chain on the CPU path, and the modules importing sgl_kernel's names.
import sglang.srt.entrypoints.http_server  # noqa: F401
import sglang.srt.managers.scheduler  # noqa: F401
import sglang.srt.mem_cache.allocation  # noqa: F401
import sglang.kernels.ops.kvcache.cache_move  # noqa: F401
import sglang.kernels.ops.speculative.eagle  # noqa: F401

assert getattr(sgl_kernel, "IS_PYTEST_SGLANG_STUB", False), sgl_kernel.__file__
assert not sgl_kernel.CALLS, sgl_kernel.CALLS
print("  python", sys.version.split()[0], "| torch", torch.__version__,
      "| torchvision", torchvision.__version__, "| sglang", md.version("sglang"),
      "| transformers", transformers.__version__)
PY
    echo "$CHECK_HASH" >"$CHECK_MARKER"
fi

# ---------------------------------------------------------------- the tiny model
MODEL_HASH=$({ echo "$VENV_HASH"; cat "$HERE/make_tiny_model.py"; printf '%s\n' "${MODEL_ARGS[@]}"; } | sha)
MODEL_MARKER=$MODEL/.pytest-sglang-model.sha256
if [[ $FORCE == 0 && -f $MODEL_MARKER && $(cat "$MODEL_MARKER") == "$MODEL_HASH" ]]; then
    log "model: cached ($MODEL)"
else
    log "model: building ${MODEL_ARGS[*]} into $MODEL"
    rm -rf "$MODEL"
    "$VENV/bin/python" "$HERE/make_tiny_model.py" "${MODEL_ARGS[@]}" --out "$MODEL"
    echo "$MODEL_HASH" >"$MODEL_MARKER"
fi

# ---------------------------------------------------------------- the small-vocabulary model
# The same tiny Llama with a 1024-token vocabulary: the tier's tests show that the plugin's
# workloads stay inside a small vocabulary (an id >= vocab_size kills the whole server).
SMALL=$REAL_HOME/model-vocab1024
SMALL_HASH=$({ echo "$VENV_HASH"; cat "$HERE/make_tiny_model.py"; echo "--vocab-size 1024"; } | sha)
SMALL_MARKER=$SMALL/.pytest-sglang-model.sha256
if [[ $FORCE == 0 && -f $SMALL_MARKER && $(cat "$SMALL_MARKER") == "$SMALL_HASH" ]]; then
    log "small-vocabulary model: cached ($SMALL)"
else
    log "small-vocabulary model: building --vocab-size 1024 into $SMALL"
    rm -rf "$SMALL"
    "$VENV/bin/python" "$HERE/make_tiny_model.py" --vocab-size 1024 --out "$SMALL"
    echo "$SMALL_HASH" >"$SMALL_MARKER"
fi

# ---------------------------------------------------------------- the speculative pair
# A planted target and its EAGLE3 draft (make_spec_models.py): greedy next token = a fixed
# permutation of the current one, the draft right on a fraction 0.6 of the words. The target
# is wide (1536) so that a 4-token verify costs more than a decode step once the batch grows:
# EAGLE3 pays at C=1 and stops paying by C=8 (real_sglang/README.md).
SPEC=$REAL_HOME/spec-wide  # its own folder: a checkout building the earlier narrow pair uses spec/
SPEC_ARGS=(--accept-rate 0.6 --hidden 1536 --layers 8 --intermediate 6144)
SPEC_HASH=$({ echo "$VENV_HASH"; cat "$HERE/make_tiny_model.py" "$HERE/make_spec_models.py"; printf '%s\n' "${SPEC_ARGS[@]}"; } | sha)
SPEC_MARKER=$SPEC/.pytest-sglang-model.sha256
if [[ $FORCE == 0 && -f $SPEC_MARKER && $(cat "$SPEC_MARKER") == "$SPEC_HASH" ]]; then
    log "speculative pair: cached ($SPEC)"
else
    log "speculative pair: building ${SPEC_ARGS[*]} into $SPEC (~15 s, 650 MB)"
    rm -rf "$SPEC"
    HF_HUB_DISABLE_PROGRESS_BARS=1 "$VENV/bin/python" "$HERE/make_spec_models.py" "${SPEC_ARGS[@]}" --out "$SPEC"
    echo "$SPEC_HASH" >"$SPEC_MARKER"
fi

log "done"
echo "PYTEST_SGLANG_REAL_PYTHON=$VENV/bin/python"
echo "PYTEST_SGLANG_REAL_MODEL=$MODEL"
echo "small-vocabulary model (1024): $SMALL"
echo "speculative pair (target, eagle3): $SPEC"
echo "total: $(elapsed) s"
