# Source me: exports the library paths that scripts/setup.sh installed.
_ab_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -f "$_ab_root/scripts/nvrtc.sh" ]; then
  eval "$(bash "$_ab_root/scripts/nvrtc.sh" --print-env 2>/dev/null || true)"
fi
unset _ab_root
