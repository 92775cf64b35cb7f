#!/usr/bin/env bash
# The library's face: libdelta.so exports its public API and nothing else.
# The library is built with -fvisibility=hidden and include/delta/ marks
# each public function DELTA_API, so the dynamic symbol table must hold
#  - only names prefixed delta_ (no managed_run, ks_solve, ...),
#  - only names declared in include/delta/*.h (no delta_k_*, delta_cu_*),
#  - every function include/delta/ declares DELTA_API (none left hidden).
# Usage: tests/test_exports.sh [BUILD] (default $DELTA_BUILD, else build);
# make test runs it with DELTA_BUILD set to its build folder.
# Prints ok/FAIL lines and "# results: P passed, F failed, S skipped".
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-${DELTA_BUILD:-build}}
case $build in /*) ;; *) build=$root/$build ;; esac
so=$build/libdelta.so
passed=0 failed=0 skipped=0
report() {  # report NAME LIST-OF-OFFENDERS
    if [ -z "$2" ]; then echo "ok   $1"; passed=$((passed + 1))
    else echo "FAIL $1:"; echo "$2" | head -30 | sed 's/^/  /'
        [ "$(echo "$2" | wc -l)" -gt 30 ] && echo "  ... $(echo "$2" | wc -l) in all"
        failed=$((failed + 1)); fi
}
if ! command -v nm >/dev/null || [ ! -f "$so" ]; then
    echo "skip exports: no nm or no $so"
    echo "# results: 0 passed, 0 failed, 1 skipped"
    exit 0
fi
exports=$(nm -D --defined-only "$so" | awk '$2 ~ /^[TDBRVWiu]$/ { print $3 }' | sort -u)
declared=$(cat "$root"/include/delta/*.h | grep -oE '\bdelta_[A-Za-z0-9_]+[[:space:]]*\(' |
           sed 's/[[:space:]]*($//' | sort -u)
marked=$(cat "$root"/include/delta/*.h | grep -E '^DELTA_API ' |
         sed -E 's/^DELTA_API [^(]*[^A-Za-z0-9_](delta_[A-Za-z0-9_]+)[[:space:]]*\(.*/\1/' | sort -u)
report "every export is prefixed delta_ ($(echo "$exports" | wc -l) exports)" \
    "$(echo "$exports" | grep -v '^delta_')"
report "every export is declared in include/delta/" \
    "$(comm -23 <(echo "$exports" | grep '^delta_') <(echo "$declared"))"
report "every DELTA_API function is exported ($(echo "$marked" | wc -l))" \
    "$(comm -13 <(echo "$exports") <(echo "$marked"))"
echo "# results: $passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
