#!/usr/bin/env bash
# Install libtorch 2.11 (what the `torch` feature / crates/bridge-torch builds and links against)
# from the PyTorch wheel into a cache folder, idempotently.
#
#   bash scripts/libtorch.sh               # install (no-op when already installed)
#   eval "$(bash scripts/libtorch.sh --print-env)"   # install if needed, then export
#                                                      # LIBTORCH and LD_LIBRARY_PATH
#   bash scripts/libtorch.sh --cuda         # also install torch's CUDA dependency wheels
#                                           # (cuBLAS, cuDNN, ...; several GB), which
#                                           # torch:cuda:N needs on a GPU machine
#
# The cache folder is ${ARRAYBRIDGE_CACHE:-~/.cache/arraybridge}/torch-venv, shared by every
# clone. The wheel is ~1.3 GB installed. `--no-deps` keeps the CUDA wheels out except the
# two small ones libtorch needs to load (libcudart, libcupti); with no GPU, libtorch runs on CPU.
#
# torch-sys does not check the libtorch version when LIBTORCH points at a wheel, so the version
# is pinned here exactly: tch 0.24 is built against libtorch 2.11.
set -euo pipefail

TORCH_VERSION="2.11.0"
CUDA_RUNTIME_VERSION="13.0.96"
CUPTI_VERSION="13.0.85"

cache="${ARRAYBRIDGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/arraybridge}"
venv="$cache/torch-venv"
python="${PYTHON:-python3}"

print_env=0
with_cuda=0
for arg in "$@"; do
  case "$arg" in
    --print-env) print_env=1 ;;
    --cuda) with_cuda=1 ;;
    -h|--help)
      sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *) echo "libtorch.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done

site_packages() {
  "$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'
}

installed_version() {
  [ -x "$venv/bin/python" ] || return 1
  local sp
  sp="$(site_packages)" || return 1
  [ -f "$sp/torch/lib/libtorch_cpu.so" ] || return 1
  [ -f "$sp/torch/version.py" ] || return 1
  sed -n "s/^__version__ = '\([^']*\)'.*/\1/p" "$sp/torch/version.py" | head -n1
}

have="$(installed_version 2>/dev/null || true)"
if [ "${have%%+*}" != "$TORCH_VERSION" ]; then
  echo "libtorch.sh: installing torch==$TORCH_VERSION into $venv" >&2
  mkdir -p "$cache"
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --no-deps \
    "torch==$TORCH_VERSION" \
    "nvidia-cuda-runtime==$CUDA_RUNTIME_VERSION" \
    "nvidia-cuda-cupti==$CUPTI_VERSION" >&2
  got="$(installed_version || true)"
  if [ "${got%%+*}" != "$TORCH_VERSION" ]; then
    echo "libtorch.sh: expected torch $TORCH_VERSION in $venv, found '${got:-nothing}'" >&2
    exit 1
  fi
fi

if [ "$with_cuda" = 1 ] && ! "$venv/bin/python" -m pip show -q nvidia-cublas >/dev/null 2>&1; then
  echo "libtorch.sh: installing torch $TORCH_VERSION's CUDA dependencies into $venv" >&2
  "$venv/bin/python" -m pip install -q "torch==$TORCH_VERSION" >&2
fi

sp="$(site_packages)"
libtorch="$sp/torch"
# libtorch's own libraries, then the CUDA runtime wheels it dlopens / links (nvidia/*/lib).
ld="$libtorch/lib"
for d in "$sp"/nvidia/*/lib "$sp"/nvidia/cu*/lib; do
  [ -d "$d" ] && case ":$ld:" in *":$d:"*) ;; *) ld="$ld:$d" ;; esac
done

if [ "$print_env" = 1 ]; then
  printf 'export LIBTORCH=%q\n' "$libtorch"
  # shellcheck disable=SC2016 # the variable expands where the line is eval'd
  printf 'export LD_LIBRARY_PATH=%q${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\n' "$ld"
else
  echo "libtorch.sh: libtorch $TORCH_VERSION at $libtorch" >&2
fi
