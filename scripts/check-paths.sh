#!/usr/bin/env bash
# Fails when a tracked file reads a path outside the repository (the golden data lives in
# fixtures/; a fresh clone has nothing beside it). Run by .ci/run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
pattern='(\.\./)+shared|/work/shared|CARGO_MANIFEST_DIR"\)[^;]*\.\./\.\./\.\.|/work/tgt'
if git grep -nE "$pattern" -- ':!scripts/check-paths.sh' ':!docs/perf.md'; then
    echo "error: the lines above read or name paths outside the repository; use the in-repository" >&2
    echo "       fixtures (test_support::fixtures::path) or a path relative to the repository" >&2
    exit 1
fi
echo "check-paths: no tracked file reads outside the repository"
