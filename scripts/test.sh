#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs what it needs, then runs every test of
# every crate with every feature. OpenCL tests run for real on PoCL; CUDA kernels are compiled by
# NVRTC; tests that need a GPU skip (they fail instead under ARRAYBRIDGE_REQUIRE_GPU=1).
# Every test binary runs (--no-fail-fast), then the Python package is built into the test
# environment (maturin develop) and its pytest suite runs; the last line sums up passed / failed
# / ignored (pytest's skips count as ignored).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
# shellcheck source=/dev/null
source scripts/env.sh
# Where the dependencies were installed, their absence is a failure, not a skip.
if clinfo -l 2>/dev/null | grep -q Device; then export ARRAYBRIDGE_REQUIRE_OPENCL=1; fi
if [ -n "${ARRAYBRIDGE_NVRTC_LIB:-}" ]; then export ARRAYBRIDGE_REQUIRE_NVRTC=1; fi
if command -v mpirun >/dev/null 2>&1; then export ARRAYBRIDGE_REQUIRE_MPI=1; fi
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --all-features --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
# The Python package: built (dev profile) into the test venv, then pytest. The paco test
# compares with the `arraybridge` binary cargo test just built.
pystatus=0
{
    VIRTUAL_ENV="$(dirname "$(dirname "$ARRAYBRIDGE_PYTHON")")" \
        "$(dirname "$ARRAYBRIDGE_PYTHON")/maturin" develop -q -m crates/bridge-python/Cargo.toml &&
        ARRAYBRIDGE_CLI="${CARGO_TARGET_DIR:-$root/target}/debug/arraybridge" \
            "$ARRAYBRIDGE_PYTHON" -m pytest -q -p no:cacheprovider crates/bridge-python/tests
} 2>&1 | tee -a "$log" || pystatus=$?
awk '/^test result:/ {
        for (i = 1; i <= NF; i++) {
            if ($(i+1) ~ /^passed/) p += $i
            if ($(i+1) ~ /^failed/) f += $i
            if ($(i+1) ~ /^ignored/) g += $i
        }
        n++
     }
     /^[0-9]+ (passed|failed|skipped|error).* in [0-9.]+s/ {
        for (i = 1; i <= NF; i++) {
            if ($(i+1) ~ /^passed/) p += $i
            if ($(i+1) ~ /^(failed|errors?)/) f += $i
            if ($(i+1) ~ /^skipped/) g += $i
        }
        py = 1
     }
     END { printf "summary: %d passed, %d failed, %d ignored in %d test binaries%s\n", p, f, g, n,
                  py ? " and pytest" : " (pytest did not run)" }' "$log"
if [ "$status" -ne 0 ]; then
    echo "summary: FAILED (cargo exit status $status); the failing tests are listed above" >&2
fi
if [ "$pystatus" -ne 0 ]; then
    echo "summary: FAILED (Python package build or pytest, exit status $pystatus)" >&2
    [ "$status" -ne 0 ] || status="$pystatus"
fi
exit "$status"
