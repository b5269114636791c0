#!/usr/bin/env bash
# The Python test environment of crates/bridge-python, idempotently: a virtual environment in
# ${ARRAYBRIDGE_CACHE:-~/.cache/arraybridge}/python-venv with maturin, pytest, NumPy, pandas,
# scikit-image, trackpy (the references the tests compare with), JAX (a second DLPack
# producer; CPU wheel), dask[array] (lazy movies streamed chunk by chunk) and astropy (FITS,
# for the guide's PACO example), shared by every clone.
#
#   bash scripts/python.sh               # install (no-op when the stamp matches)
#   bash scripts/python.sh --print-env   # install if needed, then print `export ARRAYBRIDGE_PYTHON=…`
set -euo pipefail

cache="${ARRAYBRIDGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/arraybridge}"
venv="$cache/python-venv"
python="${PYTHON:-python3}"
packages=(maturin pytest "numpy>=2.1" pandas scikit-image trackpy jax "dask[array]" astropy)
stamp="$venv/.arraybridge-stamp"
want="${packages[*]}"

print_env=0
for arg in "$@"; do
  case "$arg" in
    --print-env) print_env=1 ;;
    *) echo "python.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done

if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "python.sh: installing ${packages[*]} into $venv" >&2
  mkdir -p "$cache"
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$venv/bin/python" -m pip install -q "${packages[@]}"
  echo "$want" > "$stamp"
fi

if [ "$print_env" = 1 ]; then
  echo "export ARRAYBRIDGE_PYTHON=\"$venv/bin/python\""
fi
