# shellcheck shell=bash
# Source me after scripts/setup.sh: exports LIBTORCH (needed to build the `torch` feature),
# ARRAYBRIDGE_NVRTC_LIB and LD_LIBRARY_PATH (NVRTC and libtorch for the test binaries), and
# ARRAYBRIDGE_PYTHON (the interpreter of the Python tests).
_ab_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
eval "$(bash "$_ab_root/scripts/nvrtc.sh" --print-env)"
eval "$(bash "$_ab_root/scripts/libtorch.sh" --print-env)"
eval "$(bash "$_ab_root/scripts/python.sh" --print-env)"
unset _ab_root
