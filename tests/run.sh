#!/usr/bin/env bash
# Runs every test binary given on the command line, shows their output, and
# ends with one line "N passed, N failed" summed over all of them. A binary
# that crashes or prints no results line counts as one failure.
set -u
passed=0 failed=0 skipped=0
for t in "$@"; do
    echo "== $(basename "$t")"
    out=$("$t" 2>&1)
    rc=$?
    printf '%s\n' "$out" | grep -v '^# results'
    line=$(printf '%s\n' "$out" | grep '^# results:' | tail -1)
    if [ -z "$line" ]; then
        echo "FAIL $(basename "$t"): exited with status $rc before reporting"
        failed=$((failed + 1))
        continue
    fi
    read -r _ _ p _ f _ s _ <<<"$line"
    passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
    if [ "$rc" != 0 ] && [ "$f" = 0 ]; then
        echo "FAIL $(basename "$t"): exited with status $rc"
        failed=$((failed + 1))
    fi
done
[ "$skipped" != 0 ] && echo "($skipped skipped)"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
