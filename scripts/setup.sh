#!/usr/bin/env bash
# Install what the test suite needs, idempotently:
#   - PoCL (a real CPU OpenCL device) and the OpenCL ICD loader, from Debian's packages;
#   - shellcheck and jq (the GPU harness scripts/gpu-check.sh is linted and dry-run in CI);
#   - Open MPI (libopenmpi-dev, openmpi-bin; openssh-client, which Open MPI's launcher looks for
#     even on one node) and libclang-dev, for the opt-in `mpi` feature
#     (the `mpi` crate's bindgen needs libclang; crates/cli/tests/mpi.rs runs `mpirun`);
#   - the NVRTC wheel (CUDA's runtime compiler; works with no GPU), so every CUDA kernel is
#     compiled in CI;
#   - libtorch 2.11 from the PyTorch wheel (~1.3 GB), for the `torch` feature;
#   - the Python test environment of crates/bridge-python (scripts/python.sh: maturin, pytest,
#     NumPy, pandas, scikit-image, trackpy, JAX, dask[array]).
# Python packages go into ${ARRAYBRIDGE_CACHE:-~/.cache/arraybridge}, shared by every clone.
# Prints nothing but progress; source scripts/env.sh afterwards to get the environment.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

need_apt=()
for pkg in pocl-opencl-icd ocl-icd-opencl-dev clinfo shellcheck jq libopenmpi-dev openmpi-bin openssh-client libclang-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: apt-get install ${need_apt[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  else
    echo "setup: missing ${need_apt[*]} (run as root or install them; OpenCL and MPI tests will skip; the mpi feature needs libopenmpi-dev and libclang-dev)" >&2
  fi
fi

bash scripts/nvrtc.sh >/dev/null
bash scripts/libtorch.sh >/dev/null
bash scripts/python.sh >/dev/null
