#!/usr/bin/env bash
# Compatibility report: scikit-image's and trackpy's OWN tests, run against the installed
# libraries twice, once plain and once with arraybridge's blob_log / locate / batch / link put
# in place of theirs (scripts/peer_suites/ab_peer_plugin.py), compared test by test.
#
#   bash scripts/peer-suites.sh        # report in ${OUT:-target/peer-suites}/report.md
#
# The tests come from the pinned sdists of the installed versions (package index, cached in
# ${XDG_CACHE_HOME:-~/.cache}/arraybridge/peer-suites/; nothing of theirs is committed):
# scikit-image's tests/skimage/feature/test_blob.py; trackpy's test_feature.py and
# test_linking.py (its sdists ship no tests: they come from GitHub at the commit the sdist was
# built from, or from PEER_SUITES_TRACKPY_TESTS=<a trackpy checkout>/trackpy/tests). A test
# counts only when its substituted run called an arraybridge function. It fails (exit 1) when a
# counted test that passes with the real library does not pass with arraybridge and is not in
# scripts/peer_suites/expected_{skimage,trackpy}.txt; a listed test that passes is printed as
# "fixed, remove from the list". Package index unreachable (and nothing cached): skipped, exit 0.
# scikit-image's main-branch test_blob.py (GitHub) is run too when reachable, for information
# (or PEER_SUITES_SKIMAGE_MAIN=<a checkout>/tests/skimage/feature/test_blob.py).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [ -z "${ARRAYBRIDGE_PYTHON:-}" ]; then
    eval "$(bash scripts/python.sh --print-env)"
fi
py="$ARRAYBRIDGE_PYTHON"
here="$root/scripts/peer_suites"
out="${OUT:-target/peer-suites}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$out/work"

versions="$("$py" -c 'import skimage, trackpy; print(skimage.__version__, trackpy.__version__)')"
read -r sk_version tp_version <<<"$versions"

status=0
"$py" "$here/peer_suites.py" fetch "$work" --skimage "$sk_version" --trackpy "$tp_version" ||
    status=$?
if [ "$status" -eq 3 ]; then
    echo "peer-suites: skipped (package index unreachable)"
    exit 0
elif [ "$status" -ne 0 ]; then
    echo "peer-suites: FAILED to fetch the peers' tests (exit status $status)" >&2
    exit "$status"
fi

# run_suite SUITE DIR MODE FILES...: pytest on FILES in DIR; outcomes to $out/SUITE-MODE.json
run_suite() {
    local suite="$1" dir="$2" mode="$3" rc=0
    shift 3
    (
        cd "$dir"
        PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONDONTWRITEBYTECODE=1 \
            PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" \
            PEER_SUITES_SUITE="${suite%%-*}" PEER_SUITES_MODE="$mode" \
            PEER_SUITES_RESULTS="$out/$suite-$mode.json" \
            PEER_SUITES_TRACKPY_TESTS_DIR="$work/trackpy/tests" \
            "$py" -m pytest -q -p no:cacheprovider -p ab_peer_plugin --rootdir=. -c /dev/null "$@"
    ) >"$out/$suite-$mode.log" 2>&1 || rc=$?
    # 0: all passed, 1: some failed; anything else (interrupted, internal or usage error, no
    # tests) means the outcomes are not there
    if [ "$rc" -gt 1 ] || [ ! -s "$out/$suite-$mode.json" ]; then
        echo "peer-suites: pytest of $suite ($mode) did not run (exit status $rc):" >&2
        tail -n 20 "$out/$suite-$mode.log" >&2
        return 1
    fi
    echo "peer-suites: $suite ($mode): $(tail -n 1 "$out/$suite-$mode.log")"
}

source_of() {
    "$py" -c 'import json, sys; s = json.load(open(sys.argv[1]))[sys.argv[2]]
print(s.get("from") or s["skipped"])' "$work/sources.json" "$1"
}

report="$out/report.md"
summary="$out/summary.txt"
{
    echo "# arraybridge against the peers' own test suites"
    echo
    echo "scikit-image $sk_version, trackpy $tp_version (installed), arraybridge" \
        "$("$py" -c 'import arraybridge; print(getattr(arraybridge, "__version__", "dev"))')."
    echo "Each suite runs twice: with the real library, then with arraybridge substituted."
    echo "Expected divergences: scripts/peer_suites/expected_skimage.txt and expected_trackpy.txt."
    echo
} >"$report"
: >"$summary"

fail=0
# report_suite SUITE LABEL EXPECTED [--informational]
report_suite() {
    local suite="$1" label="$2" expected="$3"
    shift 3
    "$py" "$here/peer_suites.py" report --label "$label" --source "$(source_of "$suite")" \
        --plain "$out/$suite-plain.json" --substituted "$out/$suite-arraybridge.json" \
        --expected "$expected" --out "$report" --summary "$summary" "$@" || fail=1
}

for mode in plain arraybridge; do
    run_suite skimage "$work/skimage" "$mode" test_blob.py
done
report_suite skimage "scikit-image $sk_version blob_log" "$here/expected_skimage.txt"

if [ -d "$work/trackpy/tests" ]; then
    for mode in plain arraybridge; do
        run_suite trackpy "$work/trackpy/tests" "$mode" test_feature.py test_linking.py
    done
    report_suite trackpy "trackpy $tp_version locate+link" "$here/expected_trackpy.txt"
else
    echo "peer-suites: trackpy skipped ($(source_of trackpy))"
    echo "trackpy $tp_version: skipped ($(source_of trackpy))" | tee -a "$report" >>"$summary"
fi

# scikit-image's main branch, for information only: never fails the run
if [ -d "$work/skimage-main" ]; then
    for mode in plain arraybridge; do
        run_suite skimage-main "$work/skimage-main" "$mode" test_blob.py || true
    done
    if [ -s "$out/skimage-main-arraybridge.json" ]; then
        report_suite skimage-main "scikit-image main-branch blob_log (information)" \
            "$here/expected_skimage.txt" --informational
    fi
else
    echo "peer-suites: scikit-image main branch not run ($(source_of skimage-main))"
fi

echo "peer-suites: report in $report"
if [ "$fail" -ne 0 ]; then
    echo "peer-suites: FAILED: unexpected divergences (above); fix them or list them with" \
        "their reason in scripts/peer_suites/expected_*.txt" >&2
fi
exit "$fail"
