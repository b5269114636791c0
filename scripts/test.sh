#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs what it needs, then runs every test of
# every crate with every feature. OpenCL tests run for real on PoCL; CUDA kernels are compiled by
# NVRTC; tests that need a GPU skip (they fail instead under ARRAYBRIDGE_REQUIRE_GPU=1).
# Every test binary runs (--no-fail-fast); the last line sums up passed / failed / ignored.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
# shellcheck source=/dev/null
source scripts/env.sh
# Where the dependencies were installed, their absence is a failure, not a skip.
if clinfo -l 2>/dev/null | grep -q Device; then export ARRAYBRIDGE_REQUIRE_OPENCL=1; fi
if [ -n "${ARRAYBRIDGE_NVRTC_LIB:-}" ]; then export ARRAYBRIDGE_REQUIRE_NVRTC=1; fi
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --all-features --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
awk '/^test result:/ {
        for (i = 1; i <= NF; i++) {
            if ($(i+1) ~ /^passed/) p += $i
            if ($(i+1) ~ /^failed/) f += $i
            if ($(i+1) ~ /^ignored/) g += $i
        }
        n++
     }
     END { printf "summary: %d passed, %d failed, %d ignored in %d test binaries\n", p, f, g, n }' "$log"
if [ "$status" -ne 0 ]; then
    echo "summary: FAILED (cargo exit status $status); the failing tests are listed above" >&2
fi
exit "$status"
