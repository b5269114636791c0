#!/usr/bin/env bash
# The fuzz targets in fuzz/ (cargo-fuzz, libFuzzer + AddressSanitizer, nightly toolchain).
#
#   scripts/fuzz.sh replay              every target over its committed corpus (CI runs this)
#   scripts/fuzz.sh run [TARGET] [SEC]  fuzz TARGET (default: all, one after the other) for SEC
#                                       seconds each (default 600); new inputs join the corpus
#   scripts/fuzz.sh list                the targets
#
# Limits, the same for both: 1 GiB peak RSS and 10 s per input (a slower input is a hang); the
# targets themselves give the readers a 256 MiB budget (fuzz/fuzz_targets/common.rs).
# Crashes are written to fuzz/artifacts/TARGET/ and end the run with a non-zero status.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
targets=(npy fits tiff png csv cli)
limits=(-rss_limit_mb=1024 -malloc_limit_mb=1024 -timeout=10)

ensure_tools() {
  if ! rustup toolchain list | grep -q '^nightly'; then
    rustup toolchain install nightly --profile minimal
  fi
  if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
  fi
}

cmd="${1:-replay}"
case "$cmd" in
  list)
    printf '%s\n' "${targets[@]}"
    ;;
  replay)
    ensure_tools
    (cd fuzz && python3 seeds.py >/dev/null)
    for t in "${targets[@]}"; do
      mkdir -p "fuzz/corpus/$t"
      n=$(find "fuzz/corpus/$t" -type f | wc -l)
      echo "fuzz replay: $t ($n inputs)"
      cargo +nightly fuzz run -O "$t" "fuzz/corpus/$t" -- -runs=0 "${limits[@]}" 2>&1 | tail -n 3
    done
    echo "fuzz replay: every corpus input of every target ran without a crash, leak, OOM or hang"
    ;;
  run)
    ensure_tools
    secs="${3:-600}"
    if [ -n "${2:-}" ] && [ "${2}" != all ]; then sel=("$2"); else sel=("${targets[@]}"); fi
    (cd fuzz && python3 seeds.py >/dev/null)
    for t in "${sel[@]}"; do
      mkdir -p "fuzz/corpus/$t"
      echo "fuzz run: $t for ${secs}s"
      cargo +nightly fuzz run -O "$t" "fuzz/corpus/$t" -- -max_total_time="$secs" "${limits[@]}" \
        -print_final_stats=1 2>&1 | grep -E 'stat::|Done|ERROR|SUMMARY|#[0-9]+ *DONE' | tail -n 12
    done
    ;;
  *)
    echo "usage: scripts/fuzz.sh replay | run [TARGET|all] [SECONDS] | list" >&2
    exit 2
    ;;
esac
