#!/usr/bin/env bash
# The whole test suite, on a fresh machine: installs what it needs, then runs every test of
# every crate with every feature. OpenCL tests run for real on PoCL; CUDA kernels are compiled by
# NVRTC; tests that need a GPU skip (they fail instead under ARRAYBRIDGE_REQUIRE_GPU=1).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
# shellcheck source=/dev/null
source scripts/env.sh
# Where the dependencies were installed, their absence is a failure, not a skip.
if clinfo -l 2>/dev/null | grep -q Device; then export ARRAYBRIDGE_REQUIRE_OPENCL=1; fi
if [ -n "${ARRAYBRIDGE_NVRTC_LIB:-}" ]; then export ARRAYBRIDGE_REQUIRE_NVRTC=1; fi
cargo test --workspace --all-features "$@"
