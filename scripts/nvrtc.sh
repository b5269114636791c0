#!/usr/bin/env bash
# Install NVRTC (CUDA's runtime compiler, which needs no GPU) from the nvidia-cuda-nvrtc wheel
# into a cache folder, idempotently, and print the environment that lets bridge-cuda load it.
#
#   bash scripts/nvrtc.sh                  # install if needed; print the export lines
#   eval "$(bash scripts/nvrtc.sh --print-env)"   # the same, for sourcing (scripts/env.sh)
#
# Prints on stdout:
#   export ARRAYBRIDGE_NVRTC_LIB=<dir of libnvrtc.so.13>
#   export LD_LIBRARY_PATH=<that dir>:$LD_LIBRARY_PATH
# The cache folder is ${ARRAYBRIDGE_CACHE:-~/.cache/arraybridge}/nvrtc-venv, shared by every clone.
# The CUDA major (13) matches cudarc's `cuda-13000` feature and the GPU machine's driver.
set -euo pipefail

NVRTC_VERSION="13.0.88"

cache="${ARRAYBRIDGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/arraybridge}"
venv="$cache/nvrtc-venv"
python="${PYTHON:-python3}"

for arg in "$@"; do
  case "$arg" in
    --print-env) ;; # the default output is already the environment
    -h|--help)
      sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *) echo "nvrtc.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done

site_packages() {
  "$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'
}

installed_version() {
  [ -x "$venv/bin/python" ] || return 1
  local sp
  sp="$(site_packages)" || return 1
  [ -f "$sp/nvidia/cu13/lib/libnvrtc.so.13" ] || return 1
  "$venv/bin/python" -m pip show nvidia-cuda-nvrtc 2>/dev/null | sed -n 's/^Version: //p'
}

if [ "$(installed_version 2>/dev/null || true)" != "$NVRTC_VERSION" ]; then
  echo "nvrtc.sh: installing nvidia-cuda-nvrtc==$NVRTC_VERSION into $venv" >&2
  mkdir -p "$cache"
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --no-deps --disable-pip-version-check \
    "nvidia-cuda-nvrtc==$NVRTC_VERSION" >&2
  got="$(installed_version || true)"
  if [ "$got" != "$NVRTC_VERSION" ]; then
    echo "nvrtc.sh: expected nvidia-cuda-nvrtc $NVRTC_VERSION in $venv, found '${got:-nothing}'" >&2
    exit 1
  fi
fi

lib="$(site_packages)/nvidia/cu13/lib"
printf 'export ARRAYBRIDGE_NVRTC_LIB=%q\n' "$lib"
# shellcheck disable=SC2016 # the variable expands where the line is eval'd
printf 'export LD_LIBRARY_PATH=%q${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\n' "$lib"
