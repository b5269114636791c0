#!/usr/bin/env bash
# Validate and measure every CUDA and Torch-CUDA path on a GPU machine that has no Rust
# compiler: build here, carry the binaries, run there. docs/gpu.md is the plan and the manual.
#
#   bash scripts/gpu-check.sh build           # HERE: release test/bench binaries and the CLI,
#                                             # stripped, into .carry/gpu-check/ (git-ignored),
#                                             # packed as .carry/gpu-check.tar.xz (what travels)
#   bash scripts/gpu-check.sh run PHASE...    # THERE (carry .carry/gpu-check.tar.xz): PHASE is one or more of
#                                             #   correctness  every GPU test binary
#                                             #   python       the Python package's pytest suite
#                                             #                (CUDA through PyTorch, CuPy, JAX)
#                                             #   identity     detect/locate CSVs, CPU vs cuda:0
#                                             #   sanitize     compute-sanitizer on two small tests
#                                             #   headline     transfers, detection, locate, PACO
#                                             #   cpu          the same detection on the host
#                                             #   peers        CuPy, cuCIM, scikit-image (CPU)
#                                             #   ceilings     the machine's copy and FLOP rates
#                                             #   criterion    the carried criterion benches
#                                             #   variants     headline again per GPU_CHECK_VARIANTS
#                                             #   bench        ceilings peers headline variants
#                                             #                cpu criterion
#                                             #   profile      ncu on the hottest kernels
#                                             #   ab           knob A/B in one process order
#                                             #   all          correctness python sanitize
#                                             #                bench profile, in that order
#                                             #   plan         the one budgeted call of docs/gpu.md:
#                                             #                correctness python identity headline
#                                             #                sanitize ab profile cpu peers
#                                             #                ceilings criterion (GPU_CHECK_QUICK=1)
#   bash scripts/gpu-check.sh dry-run         # HERE: `run correctness` on a machine without a GPU;
#                                             # every GPU test must report itself skipped
#
# Every binary runs, whatever happened to the one before: each one's outcome (passed, failed,
# crashed with its signal, timed out, could not start) is a row of the summary table. Results
# are rows.md (a line per row as it ends), the archive gpu-check-<phases>.tar.gz (every log,
# rewritten after every row, so a call cut off at its limit brings back every finished row's
# log) and summary.md at the end, under $OUT when it is set (the device tool brings them back),
# else target/gpu-check-results/ (outside .carry, which travels to the device). The synthetic
# benchmark movies are generated once per call, in the background while the first phases run
# (`bench detect --movie-cache`, GPU_CHECK_MOVIES), and every process and peer reads the same
# frames. The exit status is 0 only when every row passed.
#
# Environment (defaults in brackets; every knob is also listed in docs/gpu.md):
#   ARRAYBRIDGE_REQUIRE_GPU [0]    1: a missing GPU fails the GPU tests instead of skipping them
#   ARRAYBRIDGE_FIXTURES [<repo>/fixtures]  the golden data the tests read
#   GPU_CHECK_TIMEOUT [300]        seconds one test binary may run before it is killed
#   GPU_CHECK_DEADLINE []          seconds for the whole run: later rows are "not run" (fit a call)
#   GPU_CHECK_THREADS [4]          libtest threads per test binary
#   GPU_CHECK_FILTER []            only tests whose name contains this (libtest filter)
#   GPU_CHECK_VARIANTS []          bench phase: extra runs, `;`-separated; each a `,`-separated
#                                  list of VAR=VALUE (e.g. "ARRAYBRIDGE_NVRTC_OPTIONS=--fmad=true")
#   GPU_CHECK_AB [the two passes, blocks of 1 and 5 columns, blocks of 8 rows, 4 rows a work item, pageable packing, 2 in flight, device certified search 0, unfused passes, max 512 MB, PACO trajectories on the host, the row-wise Cholesky update, the lag table pixels first, every locate candidate read back]  ab phase: `;`-separated variants as above, each
#                                  timed on bench detect 1000x512 and bench paco 61x100 between
#                                  a default run before and one after
#   GPU_CHECK_DETECT_FRAMES [1000] GPU_CHECK_PACO_BIG [1] (0 skips PACO 100x1024x1024)
#   GPU_CHECK_QUICK [0; 1 under plan]  fewer sizes, batch sizes and repetitions per bench row
#   GPU_CHECK_MOVIES [/tmp/gpu-check-movies]  where the benchmark movies are saved and read
#   GPU_CHECK_CUCIM [1]            build: 0 leaves the cuCIM peer (its pure-Python part) out
#   GPU_CHECK_MAX_MIB [62]         build: the most the call may carry, .carry/gpu-check.tar.xz and
#                                  the repository together (the device tool's limit is 64 MiB)
#   GPU_CHECK_TORCH [auto]         build: 1 requires the Torch-CUDA binaries, 0 leaves them out
#   GPU_CHECK_WHEEL [1]            build: 0 leaves the Python wheel (and pytest's wheels) out
#   GPU_CHECK_PYTHON []            python phase: the interpreter (default: the one with PyTorch,
#                                  else $ARRAYBRIDGE_PYTHON, else python3)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1
carry="$root/.carry/gpu-check"

die() { echo "gpu-check: $*" >&2; exit 2; }

# ------------------------------------------------------------------------------------------
# build (here)

cargo_artifacts() { # cargo args... -> "name<TAB>executable" lines of the test/bench artifacts
  # (`cargo test` of a package with a binary builds the binary for its tests too: only the
  # test and bench targets are kept then)
  local kinds='["test", "bench", "bin"]'
  case "$1" in test|bench) kinds='["test", "bench"]' ;; esac
  cargo "$@" --message-format=json |
    jq -r --argjson kinds "$kinds" 'select(.reason == "compiler-artifact" and .executable != null
      and any(.target.kind[]; . as $k | $kinds | index($k))) | "\(.target.name)\t\(.executable)"'
}

copy_artifacts() { # destdir < name<TAB>exe lines
  local dest="$1" name exe
  while IFS=$'\t' read -r name exe; do
    cp "$exe" "$dest/$name"
  done
}

build() {
  set -e
  command -v jq >/dev/null || die "jq is required for build (apt-get install jq)"
  rm -rf "$carry"
  mkdir -p "$carry/tests" "$carry/bench" "$carry/bin"
  echo "gpu-check: building the CUDA test binaries" >&2
  cargo_artifacts test --release --no-run -p bridge-cuda --test gpu --test nvrtc_compile --test dlpack_gpu |
    copy_artifacts "$carry/tests"
  cargo_artifacts test --release --no-run -p algorithms --features cuda \
    --test detect_gpu --test detect_locate_gpu --test paco_gpu --test detect_resident \
    --test blob_log_nd --test detect_locate_nd |
    copy_artifacts "$carry/tests"
  cargo_artifacts test --release --no-run -p arraybridge --test device_handle |
    copy_artifacts "$carry/tests"
  cargo_artifacts test --release --no-run -p arraybridge-cli --test cli_executors |
    copy_artifacts "$carry/tests"
  cargo_artifacts bench --no-run -p bridge-cuda --bench cuda_transfer | copy_artifacts "$carry/bench"
  echo "gpu-check: building the CLI (arraybridge bench)" >&2
  cargo_artifacts build --release --bin arraybridge | copy_artifacts "$carry/bin"
  if [ "${GPU_CHECK_WHEEL:-1}" != 0 ]; then
    # The Python package (abi3: any CPython >= 3.9 there) and pytest's pure-Python wheels, so
    # the python phase needs no network; NumPy, PyTorch, CuPy and JAX are the GPU machine's;
    # trackpy (pure Python; the machine has none) for the tests that compare with it.
    echo "gpu-check: building the Python wheel" >&2
    mkdir -p "$carry/python"
    [ -n "${ARRAYBRIDGE_PYTHON:-}" ] || eval "$(bash scripts/python.sh --print-env)"
    # stripped: the release profile's line tables make the library 56 MB (a 10 MB wheel), 6 MB
    # without them (a 2 MB wheel)
    "$(dirname "$ARRAYBRIDGE_PYTHON")/maturin" build --release --strip --quiet \
      -m crates/bridge-python/Cargo.toml -o "$carry/python" >&2
    "$ARRAYBRIDGE_PYTHON" -m pip download --quiet --no-deps --only-binary=:all: \
      -d "$carry/python" pytest pluggy iniconfig packaging pygments exceptiongroup tomli \
      looseversion >&2
    # trackpy publishes no wheel since 0.3.3: build the pure-Python one of the version the
    # tests compare with here
    local tp
    tp="$("$ARRAYBRIDGE_PYTHON" -m pip show trackpy 2>/dev/null | sed -n 's/^Version: //p')" || tp=""
    "$ARRAYBRIDGE_PYTHON" -m pip wheel --quiet --no-deps -w "$carry/python" "trackpy${tp:+==$tp}" >&2 ||
      echo "gpu-check: no trackpy wheel: its pytest comparisons will skip there" >&2
  fi
  if [ "${GPU_CHECK_CUCIM:-1}" != 0 ]; then
    # cuCIM's blob_log, the peer NVIDIA ships: its wheel (17 MB) does not fit the call's 64 MiB
    # next to everything else, and blob_log needs only its pure-Python `skimage` part on the
    # machine's CuPy, so that part travels (0.5 MB); clara (image IO, 15 MB of .so) stays here
    echo "gpu-check: fetching the cuCIM peer" >&2
    local tmp
    tmp="$(mktemp -d)"
    [ -n "${ARRAYBRIDGE_PYTHON:-}" ] || eval "$(bash scripts/python.sh --print-env)"
    if "$ARRAYBRIDGE_PYTHON" -m pip download --quiet --no-deps --only-binary=:all: \
        --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
        -d "$tmp" "cucim-cu13==${GPU_CHECK_CUCIM_VERSION:-26.10.0}" >&2 &&
        (cd "$tmp" && unzip -q ./cucim_cu13-*.whl 'cucim/*' -x 'cucim/clara/*' '*/tests/*'); then
      mkdir -p "$carry/peers"
      tar -C "$tmp" -czf "$carry/peers/cucim.tar.gz" cucim
    else
      echo "gpu-check: cuCIM could not be fetched: its peer row will say so" >&2
    fi
    rm -rf "$tmp"
  fi
  local torch="${GPU_CHECK_TORCH:-auto}"
  if [ "$torch" != 0 ]; then
    local env_ok=1
    if [ -z "${LIBTORCH:-}" ]; then
      # shellcheck disable=SC2046
      eval "$(bash scripts/libtorch.sh --print-env 2>/dev/null)" || env_ok=0
    fi
    if [ "$env_ok" = 1 ] && [ -n "${LIBTORCH:-}" ]; then
      echo "gpu-check: building the Torch-CUDA test binaries (LIBTORCH=$LIBTORCH)" >&2
      cargo_artifacts test --release --no-run -p bridge-torch --features cuda-interop \
        --test torch_cuda --test torch_cuda_interop | copy_artifacts "$carry/tests"
      cargo_artifacts bench --no-run -p bridge-torch --features cuda-interop \
        --bench torch_cuda_exchange | copy_artifacts "$carry/bench"
    elif [ "$torch" = 1 ]; then
      die "GPU_CHECK_TORCH=1 but libtorch is not installed (bash scripts/libtorch.sh)"
    else
      echo "gpu-check: libtorch not found: the Torch-CUDA binaries are left out" >&2
    fi
  fi
  set +e
  if command -v strip >/dev/null; then
    strip "$carry"/tests/* "$carry"/bench/* "$carry"/bin/* 2>/dev/null || true
  fi
  ls -la "$carry"/tests "$carry"/bench "$carry"/bin "$carry"/python 2>/dev/null >&2
  [ -n "$(ls -A "$carry/tests")" ] || die "no test binaries were built"
  # The call carries the repository (tracked and untracked files that git does not ignore) and
  # the carried paths, 64 MiB in all: the folder travels as one xz archive (45 MiB of binaries
  # are 13 MiB packed; 2026-11-27 the folder next to a 22 MiB repository did not fit), which
  # `run` unpacks when the folder is not there
  local archive="$root/.carry/gpu-check.tar.xz" kib arch_kib repo_kib max
  echo "gpu-check: packing $carry into $archive" >&2
  if ! tar -C "$root/.carry" -cf - gpu-check | xz -T0 -6 >"$archive.tmp"; then
    die "could not pack $carry"
  fi
  mv "$archive.tmp" "$archive"
  kib=$(du -sk "$carry" | cut -f1)
  arch_kib=$(du -k "$archive" | cut -f1)
  repo_kib=$(git -C "$root" ls-files -z --cached --others --exclude-standard |
    (cd "$root" && xargs -0 stat -c %s 2>/dev/null) | awk '{s += $1} END {print int(s / 1024)}')
  max="${GPU_CHECK_MAX_MIB:-62}"
  if [ $((arch_kib + repo_kib)) -gt $((max * 1024)) ]; then
    die "the archive ($((arch_kib / 1024)) MiB) and the repository ($((repo_kib / 1024)) MiB) are over GPU_CHECK_MAX_MIB=$max MiB"
  fi
  echo "gpu-check: $carry is $((kib / 1024)) MiB, packed $((arch_kib / 1024)) MiB, with the repository's $((repo_kib / 1024)) MiB; carry .carry/gpu-check.tar.xz and run: bash scripts/gpu-check.sh run plan" >&2
}

# ------------------------------------------------------------------------------------------
# run (there)

python_with_torch() {
  local py
  for py in /opt/torch/.venv/bin/python3 python3; do
    if command -v "$py" >/dev/null && "$py" -c 'import torch' >/dev/null 2>&1; then
      echo "$py"; return 0
    fi
  done
  return 1
}

# Library paths on the GPU machine: libtorch and its CUDA wheels from the Python that has
# PyTorch, NVRTC from the same wheels (or the CUDA toolkit). Nothing points at the build machine.
setup_env() {
  local py tlib nvlib d
  if py="$(python_with_torch)"; then
    PY="$py"
    tlib="$("$py" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' 2>/dev/null)"
    nvlib="$("$py" -c 'import sysconfig, glob; print(":".join(sorted(glob.glob(sysconfig.get_paths()["purelib"] + "/nvidia/*/lib"))))' 2>/dev/null)"
    [ -n "$tlib" ] && LIBS="$tlib"
    [ -n "$nvlib" ] && LIBS="${LIBS:+$LIBS:}$nvlib"
    if [ -z "${ARRAYBRIDGE_NVRTC_LIB:-}" ]; then
      local IFS=:
      for d in $nvlib; do
        if ls "$d"/libnvrtc.so* >/dev/null 2>&1; then export ARRAYBRIDGE_NVRTC_LIB="$d"; break; fi
      done
      unset IFS
    fi
  else
    PY=python3
  fi
  if [ -z "${ARRAYBRIDGE_NVRTC_LIB:-}" ]; then
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
      if ls "$d"/libnvrtc.so* >/dev/null 2>&1; then export ARRAYBRIDGE_NVRTC_LIB="$d"; break; fi
    done
  fi
  if [ -n "${ARRAYBRIDGE_NVRTC_LIB:-}" ]; then
    LIBS="$ARRAYBRIDGE_NVRTC_LIB${LIBS:+:$LIBS}"
    export ARRAYBRIDGE_REQUIRE_NVRTC=1
  fi
  [ -n "${LIBS:-}" ] && export LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export ARRAYBRIDGE_FIXTURES="${ARRAYBRIDGE_FIXTURES:-$root/fixtures}"
  export ARRAYBRIDGE_REQUIRE_GPU="${ARRAYBRIDGE_REQUIRE_GPU:-0}"
  export RUST_BACKTRACE=1
}

# Classify one finished test binary from its exit code and log.
# Prints: result passed failed ignored skipped
classify() {
  local rc="$1" log="$2" res passed failed ignored skipped
  passed=$(sed -n 's/^test result: .* \([0-9]*\) passed.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
  failed=$(sed -n 's/^test result: .* \([0-9]*\) failed.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
  ignored=$(sed -n 's/^test result: .* \([0-9]*\) ignored.*/\1/p' "$log" | awk '{s+=$1} END {print s+0}')
  # With --show-output, each passing test's output follows "---- NAME stdout ----"; a GPU test
  # that skipped says so on a line starting with "skipped" or "skipping".
  skipped=$(awk '/^---- .* stdout ----$/ {cur=$2; next}
                 /^(skipped|skipping)/ && cur != "" {s[cur]=1}
                 END {n=0; for (k in s) n++; print n}' "$log")
  if ! grep -q '^test result:' "$log"; then
    # pytest's last line: "3 passed, 1 skipped in 2.0s" (-q) or "=== 1 failed, 2 passed ... ==="
    local last
    last="$(grep -E '[0-9]+ (passed|failed|skipped|errors?)' "$log" | tail -1)"
    pyn() { echo "$last" | grep -oE "[0-9]+ $1" | awk '{s+=$1} END {print s+0}'; }
    passed=$(pyn passed); failed=$(( $(pyn failed) + $(pyn 'errors?') )); skipped=$(pyn skipped)
  fi
  if [ "$rc" = 0 ]; then res=passed
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then res="timed out"
  elif [ "$rc" = 126 ] || [ "$rc" = 127 ] || grep -q "error while loading shared libraries" "$log"; then
    res="could not start"
  elif [ "$rc" -gt 128 ]; then res="crashed (signal $((rc - 128)))"
  else res="failed (exit $rc)"
  fi
  echo "$res|$passed|$failed|$ignored|$skipped"
}

ROWS=""
FAIL=0
# Each row also goes to $OUT/rows.md at once, so a call cut off at its limit still reports.
row() { ROWS+="$1"$'\n'; [ -n "${ROWS_FILE:-}" ] && printf '%s\n' "$1" >>"$ROWS_FILE"; archive; }

# Every log so far into the result folder (a temporary name, then renamed: a call killed while
# it writes keeps the previous archive). Logs are small; the scratch folder is elsewhere.
archive() {
  [ -n "${ARCHIVE:-}" ] || return 0
  tar -C "$WORK" -czf "$ARCHIVE.part" . 2>/dev/null && mv -f "$ARCHIVE.part" "$ARCHIVE"
}

# A row that reports a finding rather than a pass or a failure (a comparison).
info_row() { row "| $1 | $2 | | | | | $3 |"; }

# Seconds left before GPU_CHECK_DEADLINE (a large number without one).
time_left() {
  if [ -n "${GPU_CHECK_DEADLINE:-}" ]; then echo $((DEADLINE_AT - $(date +%s))); else echo 999999; fi
}

run_binary() { # label logfile command...
  local label="$1" log="$2"; shift 2
  local start rc secs c limit left
  limit="${GPU_CHECK_TIMEOUT:-300}"
  if [ -n "${GPU_CHECK_DEADLINE:-}" ]; then
    left=$(time_left)
    if [ "$left" -lt 10 ]; then
      row "| $label | not run (GPU_CHECK_DEADLINE) | 0 | 0 | 0 | 0 | 0 |"
      FAIL=1
      return
    fi
    [ "$left" -lt "$limit" ] && limit="$left"
  fi
  start=$(date +%s%N)
  timeout --signal=KILL "$limit" "$@" >"$log" 2>&1
  rc=$?
  secs=$(awk -v a="$start" -v b="$(date +%s%N)" 'BEGIN {printf "%.1f", (b - a) / 1e9}')
  [ "$rc" = 137 ] && echo "gpu-check: killed after $limit s" >>"$log"
  c="$(classify "$rc" "$log")"
  IFS='|' read -r res passed failed ignored skipped <<<"$c"
  row "| $label | $res | $passed | $failed | $skipped | $ignored | $secs |"
  [ "$rc" = 0 ] || FAIL=1
  if [ "$rc" != 0 ]; then
    { echo "### $label: $res"; grep -E "panicked|FAILED|error|Error|signal" "$log" | head -15; } >>"$WORK/failures.md"
  fi
}

phase_correctness() {
  local t filter=()
  [ -n "${GPU_CHECK_FILTER:-}" ] && filter=("$GPU_CHECK_FILTER")
  # the OpenCL tests in these binaries run in CI on PoCL; a GPU machine with no OpenCL device
  # would only count them as skipped, hiding a CUDA test that skips (an ICD file alone is not a
  # device: the H200 image of 2026-11-26 has one and no device)
  if ! "$carry/bin/arraybridge" devices 2>/dev/null | grep -q '^opencl:'; then
    filter+=(--skip opencl)
    echo "gpu-check: no OpenCL device here (arraybridge devices): tests named *opencl* left out" >&2
  fi
  for t in "$carry"/tests/*; do
    [ -x "$t" ] || continue
    run_binary "test $(basename "$t")" "$WORK/test-$(basename "$t").log" \
      "$t" --show-output --test-threads="${GPU_CHECK_THREADS:-4}" "${filter[@]}"
  done
}

# The Python package's pytest suite against the carried wheel, installed into a scratch folder
# (nothing is installed into the machine's Python): on a GPU its CUDA tests (tests/test_cuda.py:
# DLPack with PyTorch, CuPy and JAX, pipelines on CUDA inputs) run for real.
phase_python() {
  local py="${GPU_CHECK_PYTHON:-}" lib="$SCRATCH/pylib"
  if [ -z "$py" ]; then
    py="$(python_with_torch)" || py="${ARRAYBRIDGE_PYTHON:-python3}"
  fi
  if ! ls "$carry"/python/arraybridge-*.whl >/dev/null 2>&1; then
    row "| python | could not start (no wheel carried: GPU_CHECK_WHEEL=0 at build?) | 0 | 0 | 0 | 0 | 0 |"
    FAIL=1
    return
  fi
  # the package's abi3 wheel and pytest's pure-Python wheels; a compiled helper wheel (tomli's
  # is built for the Python here) would not install on another Python, and only Pythons older
  # than 3.11 need it (pip skips what the environment marker does not ask for: --no-deps)
  local wheels=("$carry"/python/arraybridge-*.whl) w
  for w in "$carry"/python/*-none-any.whl; do [ -e "$w" ] && wheels+=("$w"); done
  run_binary "python install (wheel into a scratch folder)" "$WORK/python-install.log" \
    "$py" -m pip install --quiet --no-index --no-deps --target "$lib" "${wheels[@]}"
  run_binary "python pytest" "$WORK/python-pytest.log" \
    env PYTHONPATH="$lib" ARRAYBRIDGE_CLI="$carry/bin/arraybridge" \
    "$py" -m pytest -q -rs -p no:cacheprovider "$root/crates/bridge-python/tests"
}

# compute-sanitizer on one small detection test, one locate test and one radius-6 PACO test.
phase_sanitize() {
  local cs tool
  cs="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)"
  if [ -z "$cs" ]; then row "| sanitize | could not start (no compute-sanitizer) | 0 | 0 | 0 | 0 | 0 |"; FAIL=1; return; fi
  # the launch-time parameter check asks the driver for one index past the last parameter
  # (CUDA 13.0 has no cuFuncGetParamCount); that deliberate failing call is not a finding
  for tool in memcheck racecheck synccheck; do
    run_binary "sanitize $tool detect" "$WORK/sanitize-$tool-detect.log" \
      env ARRAYBRIDGE_CHECK_PARAMS=0 "$cs" --tool "$tool" --error-exitcode 99 "$carry/tests/detect_gpu" \
      --exact cuda::cuda_batch_equals_single_frames --test-threads=1 --show-output
    # every tool on locate too: its percentile and noise tiles share local memory
    run_binary "sanitize $tool locate" "$WORK/sanitize-$tool-locate.log" \
      env ARRAYBRIDGE_CHECK_PARAMS=0 "$cs" --tool "$tool" --error-exitcode 99 "$carry/tests/detect_locate_gpu" \
      --exact cuda::cuda_locate_batch_equals_single_frames --test-threads=1 --show-output
    run_binary "sanitize $tool paco r6" "$WORK/sanitize-$tool-paco.log" \
      env ARRAYBRIDGE_CHECK_PARAMS=0 "$cs" --tool "$tool" --error-exitcode 99 "$carry/tests/paco_gpu" \
      --exact cuda::large_patches_match_cpu --test-threads=1 --show-output
  done
}

# ------------------------------------------------------------------------------------------
# The benchmark movies: generated once per call (about 26 s for 1000x512² on one core), in the
# background while the first phases run; every bench process and peer reads the saved frames.

MOVIES_PID=""
movies_dir() { echo "${GPU_CHECK_MOVIES:-/tmp/gpu-check-movies}"; }
start_movies() {
  local cli="$carry/bin/arraybridge" dir frames
  dir="$(movies_dir)"; frames="${GPU_CHECK_DETECT_FRAMES:-1000}"
  mkdir -p "$dir"
  ( "$cli" --quiet bench detect --frames "$frames" --size 512 --particles 100 \
      --movie-cache "$dir" --prepare-only &&
    "$cli" --quiet bench detect --frames 8 --size 4096 --particles 2000 \
      --movie-cache "$dir" --prepare-only ) >"$WORK/movies.log" 2>&1 &
  MOVIES_PID=$!
}
# Wait for the movies (at most until the deadline); a row says so when they are not there.
wait_movies() {
  [ -n "$MOVIES_PID" ] || return 0
  local t0 rc
  t0=$(date +%s)
  while kill -0 "$MOVIES_PID" 2>/dev/null && [ "$(time_left)" -gt 10 ]; do sleep 1; done
  if kill -0 "$MOVIES_PID" 2>/dev/null; then
    kill "$MOVIES_PID" 2>/dev/null
    info_row "benchmark movies" "not ready before GPU_CHECK_DEADLINE" "$(($(date +%s) - t0))"
  else
    wait "$MOVIES_PID"; rc=$?
    [ "$rc" = 0 ] || { info_row "benchmark movies" "failed (exit $rc): movies.log" 0; FAIL=1; }
    echo "gpu-check: movies ready (waited $(($(date +%s) - t0)) s)" >&2
  fi
  MOVIES_PID=""
}
movie_npy() { echo "$(movies_dir)/synth-u16-512-p100-seed1.npy"; }

quick() { [ "${GPU_CHECK_QUICK:-0}" = 1 ]; }

# ------------------------------------------------------------------------------------------
# identity: the CSVs of `detect` on the CPU and on cuda:0, compared byte for byte (LoG with the
# fixtures' `default_rel` settings: sigma 1-3, 10 scales, threshold_rel 0.2; locate) (a finding
# per input in identity.md and a row; a difference is reported, not failed: docs/perf.md says
# which devices promise identical bytes)

# Compare two CSVs: the table row goes to identity.md, the differing rows to FILE; prints the
# table row.
compare_csvs() { # label a.csv b.csv file
  local out
  out="$("$PY" "$root/scripts/gpu/compare_csv.py" "$1" "$2" "$3" 2>&1)"
  echo "$out" >"$4"
  echo "$out" | head -1 | tee -a "$WORK/identity.md"
}

phase_identity() {
  local cli="$carry/bin/arraybridge" input label args dev t0 line
  wait_movies
  local fx="$root/fixtures/detect/blob_log"
  local log_args=(--max-sigma 3 --num-sigma 10 --threshold none --threshold-rel 0.2)
  echo "| input | verdict | rows cpu / device | identical rows | identical positions | largest relative difference |" >"$WORK/identity.md"
  echo "|---|---|---|---|---|---|" >>"$WORK/identity.md"
  for spec in "hisnr_u16|$fx/hisnr_u16.npy|log" "lowsnr_f32|$fx/lowsnr_f32.npy|log" \
              "movie_log|$(movie_npy)|log" "movie_locate|$(movie_npy)|locate"; do
    IFS='|' read -r label input args <<<"$spec"
    local extra=("${log_args[@]}")
    [ "$args" = locate ] && extra=(--method locate --diameter 7 --minmass 200)
    for dev in cpu cuda:0; do
      run_binary "identity $label $dev" "$WORK/identity-$label-${dev%%:*}.log" \
        "$cli" --quiet detect "$input" --device "$dev" "${extra[@]}" -o "$SCRATCH/identity-$label-${dev%%:*}.csv"
    done
    t0=$(date +%s)
    line="$(compare_csvs "$label" "$SCRATCH/identity-$label-cpu.csv" \
      "$SCRATCH/identity-$label-cuda.csv" "$WORK/identity-$label-compare.txt")"
    info_row "identity $label cpu vs cuda:0" "$(echo "$line" | cut -d'|' -f3-5 | tr '|' ' ')" "$(($(date +%s) - t0))"
  done
  # the pass knobs must not change a byte: the default (the fused log_pass_block, 8 rows a work
  # item on CUDA) against the two passes with 1 row, 1 column, the per-tap edge handling of
  # log_pass_x and two batches in flight (also detect_gpu's cuda_tiled_pass_gives_the_two_passes_cube)
  run_binary "identity movie_log cuda:0 rows 1 cols 1" "$WORK/identity-movie_log-rows1.log" \
    env ARRAYBRIDGE_DETECT_BLOCK=0 ARRAYBRIDGE_DETECT_ROWS=1 ARRAYBRIDGE_DETECT_COLS=1 \
    ARRAYBRIDGE_DETECT_X_INTERIOR=0 ARRAYBRIDGE_DETECT_IN_FLIGHT=2 \
    "$cli" --quiet detect "$(movie_npy)" --device cuda:0 "${log_args[@]}" -o "$SCRATCH/identity-movie_log-rows1.csv"
  line="$(compare_csvs "movie_log, cuda:0 default vs rows 1 cols 1" "$SCRATCH/identity-movie_log-cuda.csv" \
    "$SCRATCH/identity-movie_log-rows1.csv" "$WORK/identity-movie_log-rows1-compare.txt")"
  if echo "$line" | grep -q '| byte-identical |'; then
    info_row "identity movie_log cuda:0 default vs rows 1 cols 1" "byte-identical" 0
  else
    row "| identity movie_log cuda:0 default vs rows 1 cols 1 | failed (the pass knobs changed the CSV) | 0 | 1 | 0 | 0 | 0 |"
    FAIL=1
  fi
  # the certified f32 search (the default) against the cube in the working type: both must be
  # the CPU's bytes
  run_binary "identity movie_log cuda:0 working-type cube" "$WORK/identity-movie_log-cube.log" \
    env ARRAYBRIDGE_DETECT_DEVICE_CERTIFIED=0 \
    "$cli" --quiet detect "$(movie_npy)" --device cuda:0 "${log_args[@]}" -o "$SCRATCH/identity-movie_log-cube.csv"
  line="$(compare_csvs "movie_log, cpu vs cuda:0 working-type cube" "$SCRATCH/identity-movie_log-cpu.csv" \
    "$SCRATCH/identity-movie_log-cube.csv" "$WORK/identity-movie_log-cube-compare.txt")"
  if echo "$line" | grep -q '| byte-identical |'; then
    info_row "identity movie_log cpu vs cuda:0 working-type cube" "byte-identical" 0
  else
    row "| identity movie_log cpu vs cuda:0 working-type cube | failed (the device differs from the CPU) | 0 | 1 | 0 | 0 | 0 |"
    FAIL=1
  fi
}

bench_once() { # tag: one pass of every measurement, under the current environment
  local tag="$1" cli="$carry/bin/arraybridge" frames mc
  frames="${GPU_CHECK_DETECT_FRAMES:-1000}"
  wait_movies
  mc=(--movie-cache "$(movies_dir)")
  local sizes=1,4,16,64,256,1024 reps=10 batches=4,16,64,256 big=1,4
  if quick; then sizes=1,64,1024; reps=5; batches=4,64,256; big=4; fi
  env | grep -E '^ARRAYBRIDGE_' | sort >"$WORK/bench-$tag-env.txt"
  run_binary "bench $tag detect ${frames}x512" "$WORK/bench-$tag-detect512.md" \
    "$cli" bench detect --device cuda:0 --frames "$frames" --size 512 --particles 100 --batch-sizes "$batches" "${mc[@]}"
  run_binary "bench $tag locate ${frames}x512" "$WORK/bench-$tag-locate512.md" \
    "$cli" bench detect --method locate --device cuda:0 --frames "$frames" --size 512 --particles 100 --batch-sizes "$batches" "${mc[@]}"
  run_binary "bench $tag paco 61x100" "$WORK/bench-$tag-paco100.md" \
    "$cli" bench paco --device cuda:0 --frames 61 --size 100 --reps 10
  # where a small cube's 4 ms go (goal 2 ms): a span per stage, the host's included
  run_binary "bench $tag paco 61x100 traced" "$WORK/bench-$tag-paco100-trace.md" \
    env ARRAYBRIDGE_TRACE=1 "$cli" bench paco --device cuda:0 --frames 61 --size 100 --reps 2 --modes off
  # the per-stage breakdown waits for every kernel, so it is a separate, shorter run
  run_binary "bench $tag detect 128x512 traced" "$WORK/bench-$tag-detect512-trace.md" \
    env ARRAYBRIDGE_TRACE=1 "$cli" bench detect --device cuda:0 --frames 128 --size 512 --particles 100 --batch-sizes 64 "${mc[@]}"
  run_binary "bench $tag locate 128x512 traced" "$WORK/bench-$tag-locate512-trace.md" \
    env ARRAYBRIDGE_TRACE=1 "$cli" bench detect --method locate --device cuda:0 --frames 128 --size 512 --particles 100 --batch-sizes 64 "${mc[@]}"
  # the loss of two batches in flight at 256 frames a batch (third H200 run): where it goes
  run_binary "bench $tag detect ${frames}x512 traced in flight 2 b256" "$WORK/bench-$tag-detect512-trace-inflight2.md" \
    env ARRAYBRIDGE_TRACE=1 ARRAYBRIDGE_DETECT_IN_FLIGHT=2 "$cli" bench detect --device cuda:0 --frames "$frames" --size 512 --particles 100 --batch-sizes 256 "${mc[@]}"
  run_binary "bench $tag transfer" "$WORK/bench-$tag-transfer.md" \
    "$cli" bench transfer --device cuda:0 --sizes-mb "$sizes" --reps "$reps"
  # the transfer knobs against the row above: host ranges page-locked in place, whole chunks
  run_binary "bench $tag transfer registered" "$WORK/bench-$tag-transfer-registered.md" \
    env ARRAYBRIDGE_HOST_REGISTER_MB=1 "$cli" bench transfer --device cuda:0 --sizes-mb 64,1024 --reps "$reps"
  run_binary "bench $tag transfer whole chunks" "$WORK/bench-$tag-transfer-whole.md" \
    env ARRAYBRIDGE_STAGING_ADAPT=0 "$cli" bench transfer --device cuda:0 --sizes-mb 64,1024 --reps "$reps"
  if [ "${GPU_CHECK_PACO_BIG:-1}" = 1 ]; then
    run_binary "bench $tag paco 100x1024" "$WORK/bench-$tag-paco1024.md" \
      "$cli" bench paco --device cuda:0 --frames 100 --size 1024 --reps 1
    # where the no-sub-pixel 1024² time goes (a span per stage), and the trajectories computed
    # on the host (paco_accumulate) against the row above's (paco_traj, the default on GPUs)
    run_binary "bench $tag paco 100x1024 traced" "$WORK/bench-$tag-paco1024-trace.md" \
      env ARRAYBRIDGE_TRACE=1 "$cli" bench paco --device cuda:0 --frames 100 --size 1024 --reps 1 --modes off
    run_binary "bench $tag paco 100x1024 host trajectories" "$WORK/bench-$tag-paco1024-traj-host.md" \
      env ARRAYBRIDGE_PACO_TRAJ=host "$cli" bench paco --device cuda:0 --frames 100 --size 1024 --reps 1 --modes off
  fi
  run_binary "bench $tag detect 8x4096" "$WORK/bench-$tag-detect4096.md" \
    "$cli" bench detect --device cuda:0 --frames 8 --size 4096 --particles 2000 --batch-sizes "$big" "${mc[@]}"
}

phase_headline() { bench_once default; }

phase_ceilings() {
  run_binary "ceilings (torch: d2d copy, matmul, pinned copies)" "$WORK/bench-ceilings.md" \
    "$PY" "$root/scripts/gpu/ceilings.py"
}

# The peers on the same movie (the one `bench detect` saved): CuPy's and cuCIM's blob_log on
# this GPU, scikit-image's on this host's CPU (one process, then every core).
phase_peers() {
  local frames n_gpu n_cpu peers="$SCRATCH/peers" pp=()
  frames="${GPU_CHECK_DETECT_FRAMES:-1000}"
  n_gpu="$frames"; n_cpu=64
  quick && { n_gpu=$((frames < 200 ? frames : 200)); n_cpu=32; }
  wait_movies
  run_binary "peer: CuPy blob_log ${n_gpu}x512" "$WORK/bench-peer-cupy.md" \
    "$PY" "$root/scripts/gpu/cupy_blob_log.py" --impl cupy --movie "$(movie_npy)" --frames "$n_gpu"
  if [ -f "$carry/peers/cucim.tar.gz" ]; then
    mkdir -p "$peers" && tar -C "$peers" -xzf "$carry/peers/cucim.tar.gz" && pp=(env "PYTHONPATH=$peers")
    run_binary "peer: cuCIM blob_log ${n_gpu}x512" "$WORK/bench-peer-cucim.md" \
      "${pp[@]}" "$PY" "$root/scripts/gpu/cupy_blob_log.py" --impl cucim --movie "$(movie_npy)" --frames "$n_gpu"
  else
    info_row "peer: cuCIM blob_log" "not carried (GPU_CHECK_CUCIM=0 or no network at build)" 0
  fi
  run_binary "peer: scikit-image blob_log ${n_cpu}x512, 1 process" "$WORK/bench-peer-skimage1.md" \
    "$PY" "$root/scripts/gpu/cupy_blob_log.py" --impl skimage --movie "$(movie_npy)" --frames "$n_cpu" --workers 1
  run_binary "peer: scikit-image blob_log $((n_cpu * 4))x512, every core" "$WORK/bench-peer-skimage-all.md" \
    "$PY" "$root/scripts/gpu/cupy_blob_log.py" --impl skimage --movie "$(movie_npy)" --frames $((n_cpu * 4)) --workers 0
}

# CPU on this machine's cores, for the GPU/CPU ratio (the same movie's first frames)
phase_cpu() {
  local cli="$carry/bin/arraybridge" n=200
  quick && n=100
  wait_movies
  run_binary "bench cpu detect ${n}x512" "$WORK/bench-cpu-detect512.md" \
    "$cli" bench detect --device cpu --frames "$n" --size 512 --particles 100 --batch-sizes 16 --movie-cache "$(movies_dir)"
  run_binary "bench cpu locate ${n}x512" "$WORK/bench-cpu-locate512.md" \
    "$cli" bench detect --method locate --device cpu --frames "$n" --size 512 --particles 100 --batch-sizes 16 --movie-cache "$(movies_dir)"
  run_binary "bench cpu paco 61x100" "$WORK/bench-cpu-paco100.md" \
    "$cli" bench paco --device cpu --frames 61 --size 100 --reps 3
}

phase_criterion() {
  local b
  for b in "$carry"/bench/*; do
    [ -x "$b" ] || continue
    run_binary "bench binary $(basename "$b")" "$WORK/bench-bin-$(basename "$b").md" \
      env ARRAYBRIDGE_BENCH_TABLE=1 ARRAYBRIDGE_BENCH_MAX_MB=1024 "$b" --bench
  done
}

phase_variants() {
  [ -n "${GPU_CHECK_VARIANTS:-}" ] || return 0
  local i=0 v IFS=';'
  for v in $GPU_CHECK_VARIANTS; do
    i=$((i + 1))
    echo "variant$i: $v" >>"$WORK/variants.txt"
    # a subshell, so the variant's settings end with it; its rows come back through a file
    # shellcheck disable=SC2030,SC2031
    ( IFS=','; for kv in $v; do export "${kv%%=*}=${kv#*=}"; done; unset IFS
      ROWS=""; FAIL=0; bench_once "variant$i"
      printf '%s' "$ROWS" >"$WORK/rows-variant$i"; exit "$FAIL" ) || FAIL=1
    # shellcheck disable=SC2031
    ROWS+="$(cat "$WORK/rows-variant$i")"$'\n'
  done
  unset IFS
}

phase_bench() {
  phase_ceilings; phase_peers; phase_headline; phase_variants; phase_cpu; phase_criterion
}

# Knob A/B: the default, every variant of GPU_CHECK_AB, the default again, one after the other
# in this call (timings compare only within one machine and call); one row per run, the
# tables in ab-<n>-<tag>.md and all of them in ab.md.
phase_ab() {
  local cli="$carry/bin/arraybridge" frames v i=0 tag
  frames="${GPU_CHECK_DETECT_FRAMES:-1000}"
  local ab="${GPU_CHECK_AB:-ARRAYBRIDGE_DETECT_BLOCK=0;ARRAYBRIDGE_DETECT_BLOCK_COLS=1;ARRAYBRIDGE_DETECT_BLOCK_COLS=5;ARRAYBRIDGE_DETECT_BLOCK=8;ARRAYBRIDGE_DETECT_ROWS=4;ARRAYBRIDGE_CUDA_PACK=pageable;ARRAYBRIDGE_DETECT_IN_FLIGHT=2;ARRAYBRIDGE_DETECT_DEVICE_CERTIFIED=0;ARRAYBRIDGE_DETECT_PASS_FMA=0;ARRAYBRIDGE_DETECT_MAX_MB=512;ARRAYBRIDGE_PACO_TRAJ=host;ARRAYBRIDGE_PACO_CHOL=rows;ARRAYBRIDGE_PACO_LAG_ORDER=pixels;ARRAYBRIDGE_LOCATE_KEEP=0;ARRAYBRIDGE_DETECT_SCAN_GROUPS=0;ARRAYBRIDGE_LOCATE_NOISE=rows}"
  local vs=()
  wait_movies
  IFS=';' read -r -a vs <<<"$ab"
  local runs=("" "${vs[@]}" "")
  for v in "${runs[@]}"; do
    i=$((i + 1))
    tag="${v:-default}"
    # the variant's VAR=VALUE words unquoted on purpose; $1, $2 are the inner shell's
    # shellcheck disable=SC2086,SC2016
    run_binary "ab $i $tag" "$WORK/ab-$i.md" env ${v//,/ } sh -c \
      '"$1" bench detect --device cuda:0 --frames "$2" --size 512 --particles 100 --batch-sizes 4,64,256,64 --movie-cache "$3" &&
       "$1" bench detect --method locate --device cuda:0 --frames "$2" --size 512 --particles 100 --batch-sizes 64,256 --movie-cache "$3" &&
       "$1" bench paco --device cuda:0 --frames 61 --size 100 --reps 10' sh "$cli" "$frames" "$(movies_dir)"
    { echo "## $i: $tag"; cat "$WORK/ab-$i.md"; echo; } >>"$WORK/ab.md"
  done
}

phase_profile() {
  local ncu cli="$carry/bin/arraybridge"
  ncu="$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || true)"
  if [ -z "$ncu" ]; then row "| profile | could not start (no ncu) | 0 | 0 | 0 | 0 | 0 |"; FAIL=1; return; fi
  export ARRAYBRIDGE_NVRTC_OPTIONS="${ARRAYBRIDGE_NVRTC_OPTIONS:---fmad=false} -lineinfo"
  run_binary "profile detect 32x512" "$WORK/profile-detect.txt" \
    "$ncu" --clock-control none --launch-skip 4 --launch-count 40 --section SpeedOfLight \
    --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
    "$cli" bench detect --device cuda:0 --frames 32 --size 512 --batch-sizes 16
  # the two passes (the default until 2026-11-28) for the kernel-level comparison
  run_binary "profile detect 32x512 two passes" "$WORK/profile-detect-two-passes.txt" \
    env ARRAYBRIDGE_DETECT_BLOCK=0 "$ncu" --clock-control none --launch-skip 4 --launch-count 40 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis \
    "$cli" bench detect --device cuda:0 --frames 32 --size 512 --batch-sizes 16
  run_binary "profile paco 61x100" "$WORK/profile-paco.txt" \
    "$ncu" --clock-control none --launch-count 30 --section SpeedOfLight --section LaunchStats \
    --section Occupancy --section MemoryWorkloadAnalysis \
    "$cli" bench paco --device cuda:0 --frames 61 --size 100 --reps 1
}

PHASES="correctness python identity sanitize headline cpu peers ceilings criterion variants bench profile ab"
run() {
  [ $# -gt 0 ] || die "run needs a phase: $PHASES, all or plan"
  if [ ! -d "$carry/tests" ] && [ -f "$root/.carry/gpu-check.tar.xz" ]; then
    tar -C "$root/.carry" -xJf "$root/.carry/gpu-check.tar.xz" || die "could not unpack .carry/gpu-check.tar.xz"
  fi
  [ -d "$carry/tests" ] || die "$carry missing: run 'bash scripts/gpu-check.sh build' here and carry .carry/gpu-check.tar.xz"
  local phases=() p out
  for p in "$@"; do
    case "$p" in
      all) phases+=(correctness python sanitize bench profile) ;;
      plan)
        # the one budgeted call (docs/gpu.md): the most valuable rows first
        export GPU_CHECK_QUICK="${GPU_CHECK_QUICK:-1}"
        phases+=(correctness python identity headline sanitize ab profile cpu peers ceilings criterion) ;;
      *)
        case " $PHASES " in
          *" $p "*) phases+=("$p") ;;
          *) die "unknown phase $p ($PHASES, all, plan)" ;;
        esac ;;
    esac
  done
  setup_env
  out="${OUT:-$root/target/gpu-check-results}"
  mkdir -p "$out"
  ROWS_FILE="$out/rows.md"
  : >"$ROWS_FILE"
  DEADLINE_AT=$(( $(date +%s) + ${GPU_CHECK_DEADLINE:-0} ))
  WORK="$(mktemp -d)"
  SCRATCH="$(mktemp -d)"
  local name
  name="gpu-check-$(IFS=-; echo "${phases[*]}")"
  [ "${#name}" -gt 80 ] && name="gpu-check-${phases[0]}-to-${phases[${#phases[@]}-1]}"
  ARCHIVE="$out/$name.tar.gz"
  {
    echo "date: $(date -u +%FT%TZ)"
    echo "host: $(uname -srm)"
    echo "cpus: $(nproc)"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 || echo "nvidia-smi: none"
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    env | grep -E '^(ARRAYBRIDGE_|GPU_CHECK_)' | sort
  } >"$WORK/env.txt" 2>&1
  case " ${phases[*]} " in
    *" identity "*|*" headline "*|*" bench "*|*" cpu "*|*" peers "*|*" ab "*|*" variants "*) start_movies ;;
  esac
  for p in "${phases[@]}"; do
    echo "gpu-check: phase $p ($(time_left) s left)" >&2
    echo "phase $p: start $(date -u +%T), $(time_left) s left" >>"$WORK/phases.txt"
    "phase_$p"
  done
  [ -n "$MOVIES_PID" ] && kill "$MOVIES_PID" 2>/dev/null
  {
    echo "# gpu-check ${phases[*]}"
    echo
    sed 's/^/    /' "$WORK/env.txt"
    echo
    echo "| what | result | passed | failed | skipped | ignored | seconds |"
    echo "|---|---|---|---|---|---|---|"
    printf '%s' "$ROWS"
    if [ -f "$WORK/identity.md" ]; then echo; echo "## CPU against cuda:0"; cat "$WORK/identity.md"; fi
    if [ -f "$WORK/failures.md" ]; then echo; echo "## Failures"; cat "$WORK/failures.md"; fi
  } >"$WORK/summary.md"
  cp "$WORK/summary.md" "$out/summary.md"
  archive
  rm -rf "$WORK" "$SCRATCH"
  cat "$out/summary.md"
  if [ "$FAIL" = 0 ]; then echo "gpu-check: every row passed"; else echo "gpu-check: FAILURES (see summary.md and $name.tar.gz in $out)"; fi
  return "$FAIL"
}

# The dry run: every carried test binary runs on a machine without a GPU; each GPU test must
# report itself skipped, and nothing may crash or fail.
dry_run() {
  local status=0
  unset OUT
  ARRAYBRIDGE_REQUIRE_GPU=0 run correctness python || status=1
  local s="$root/target/gpu-check-results/summary.md"
  # nvrtc_compile needs NVRTC, not a GPU: it runs for real here
  if grep -vE '\| test nvrtc_compile ' "$s" | grep -qE '\| test [^|]* \| passed \| [0-9]+ \| 0 \| 0 \|'; then
    echo "gpu-check: dry run: a test binary reported no skipped test on a machine without a GPU" >&2
    status=1
  fi
  return "$status"
}

case "${1:-}" in
  build) build ;;
  run) shift; run "$@" ;;
  dry-run) dry_run ;;
  *) sed -n '2,/^set -uo pipefail/{/^set/!p}' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
