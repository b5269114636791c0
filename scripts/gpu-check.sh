#!/usr/bin/env bash
# Prove the CUDA backend on a GPU machine in two steps.
#
#   bash scripts/gpu-check.sh build     # HERE: build test + bench binaries (release, stripped)
#                                       # and copy them to .carry/gpu-check/ (git-ignored)
#   bash scripts/gpu-check.sh run       # ON THE GPU MACHINE (with .carry carried): run every
#                                       # test binary with ARRAYBRIDGE_REQUIRE_GPU=1, then the
#                                       # transfer benchmark, and print a table
#
# Environment:
#   GPU_CHECK_PACKAGES   packages whose tests and benches to build
#                        (default: bridge-cuda algorithms)
#   GPU_CHECK_FEATURES   cargo features for them (default: algorithms/cuda, which turns on the
#                        detection and PACO CUDA tests)
#   CARGO_TARGET_DIR     honoured by `build`
#   ARRAYBRIDGE_BENCH_MAX_MB   largest transfer size for the benchmark (default 4096)
#   GPU_CHECK_CRITERION=1      also run the full criterion benchmark (slow; default: the quick
#                              best-of-5 table only)
# `run` finds libnvrtc on the GPU machine (CUDA toolkit, ldconfig or the nvidia-cuda-nvrtc
# wheel) and requires it (ARRAYBRIDGE_REQUIRE_NVRTC=1). Results also go to $OUT when it is set.
# Binaries are release builds (debug test binaries do not fit the 64 MiB a device call carries).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
carry="$root/.carry/gpu-check"
packages="${GPU_CHECK_PACKAGES:-bridge-cuda algorithms}"
features="${GPU_CHECK_FEATURES:-algorithms/cuda}"

build() {
  command -v jq >/dev/null || { echo "gpu-check: jq is required for build" >&2; exit 1; }
  rm -rf "$carry"
  mkdir -p "$carry/tests" "$carry/bench"
  local pk=() p
  for p in $packages; do pk+=(-p "$p"); done
  [ -n "$features" ] && pk+=(--features "$features")
  echo "gpu-check: building tests (${packages})" >&2
  cargo test --release "${pk[@]}" --no-run --message-format=json |
    jq -r 'select(.reason == "compiler-artifact" and .executable != null and .profile.test == true) | "\(.target.name)\t\(.executable)"' |
    while IFS=$'\t' read -r name exe; do
      cp "$exe" "$carry/tests/$name-$(basename "$exe" | sed 's/.*-//')"
    done
  echo "gpu-check: building benches" >&2
  cargo bench "${pk[@]}" --no-run --message-format=json |
    jq -r 'select(.reason == "compiler-artifact" and .executable != null and (.target.kind | index("bench"))) | "\(.target.name)\t\(.executable)"' |
    while IFS=$'\t' read -r name exe; do
      cp "$exe" "$carry/bench/$name"
    done
  if command -v strip >/dev/null; then strip "$carry"/tests/* "$carry"/bench/* 2>/dev/null || true; fi
  ls -la "$carry/tests" "$carry/bench" >&2
  du -sh "$carry" >&2
  if [ -z "$(ls -A "$carry/tests")" ]; then echo "gpu-check: no test binaries were built" >&2; exit 1; fi
  echo "gpu-check: now run on the GPU machine (carry .carry): bash scripts/gpu-check.sh run" >&2
}

find_nvrtc() {
  local d
  if [ -n "${ARRAYBRIDGE_NVRTC_LIB:-}" ] && [ -d "$ARRAYBRIDGE_NVRTC_LIB" ]; then echo "$ARRAYBRIDGE_NVRTC_LIB"; return; fi
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    if ls "$d"/libnvrtc.so* >/dev/null 2>&1; then echo "$d"; return; fi
  done
  d="$(ldconfig -p 2>/dev/null | awk '/libnvrtc\.so/ {print $NF; exit}')"
  if [ -n "$d" ]; then dirname "$d"; return; fi
  for py in python3 /opt/torch/.venv/bin/python3; do
    d="$("$py" -c 'import sysconfig,glob; print((glob.glob(sysconfig.get_paths()["purelib"]+"/nvidia/cu*/lib/libnvrtc.so*") or [""])[0])' 2>/dev/null || true)"
    if [ -n "$d" ]; then dirname "$d"; return; fi
  done
}

run() {
  [ -d "$carry/tests" ] || { echo "gpu-check: $carry missing; run 'build' here and carry .carry" >&2; exit 1; }
  local out="${OUT:-$root/.carry/gpu-check-results}"
  mkdir -p "$out"
  local nv
  nv="$(find_nvrtc || true)"
  if [ -n "$nv" ]; then
    export LD_LIBRARY_PATH="$nv${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export ARRAYBRIDGE_REQUIRE_NVRTC=1
  else
    echo "gpu-check: libnvrtc not found on this machine; kernel tests will fail" >&2
  fi
  export ARRAYBRIDGE_REQUIRE_GPU=1
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | tee "$out/device.txt" || true
  local table="| test binary | result | passed | failed | seconds |\n|---|---|---|---|---|\n"
  local fail=0 t log start secs passed failed res
  for t in "$carry"/tests/*; do
    log="$out/$(basename "$t").log"
    start=$(date +%s%N)
    if "$t" --test-threads=4 >"$log" 2>&1; then res=ok; else res=FAILED; fail=1; fi
    secs=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN {printf "%.1f", (b - a) / 1e9}')
    passed=$(grep -o '[0-9]* passed' "$log" | awk '{s+=$1} END {print s+0}')
    failed=$(grep -o '[0-9]* failed' "$log" | awk '{s+=$1} END {print s+0}')
    table+="| $(basename "$t") | $res | $passed | $failed | ${secs} |\n"
    if [ "$res" = FAILED ]; then grep -E "panicked|FAILED|Error" "$log" | head -20 >&2 || true; fi
  done
  printf "%b" "$table" | tee "$out/tests.md"
  local b
  for b in "$carry"/bench/*; do
    [ -x "$b" ] || continue
    echo "## $(basename "$b") ($(date -u +%F), $(head -1 "$out/device.txt" 2>/dev/null))" | tee "$out/bench.md"
    if ! ARRAYBRIDGE_BENCH_TABLE=1 "$b" --bench 2>&1 | tee -a "$out/bench.md"; then fail=1; fi
    if [ "${GPU_CHECK_CRITERION:-0}" = 1 ]; then
      "$b" --bench --noplot 2>&1 | tee "$out/criterion.log" | grep -E "^cuda_|time:|thrpt:" || fail=1
    fi
  done
  if [ "$fail" = 0 ]; then echo "gpu-check: all passed"; else echo "gpu-check: FAILURES (logs in $out)"; fi
  return "$fail"
}

case "${1:-}" in
  build) build ;;
  run) run ;;
  *) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
