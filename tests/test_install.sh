#!/usr/bin/env bash
# The library face, as a user meets it:
#  - make install DESTDIR=… lays out headers, libdelta.a, libdelta.so.X.Y.Z
#    (soname libdelta.so.X) with its links, the delta tool and delta.pc
#    (version and prefix right); make uninstall removes every file of it;
#  - installed into a temporary prefix, examples/ builds through
#    pkg-config, static and shared; each trains its own network inside the
#    budget with the delta policy: the loss falls and the peak device
#    bytes stay within the budget, which is below the unconstrained peak;
#    the shared one loads the installed libdelta.so, the static one none;
#    train_builtin trains a built-in model through delta/train.h within
#    its budget;
#  - every C example of docs/API.md compiles against the installed
#    headers, links and runs; its shared and static link commands, run as
#    they stand under that prefix, give programs that run (the shared one
#    finding libdelta.so through its rpath).
# Runs from make test (tests/run.sh), which passes the build's make
# variables in DELTA_MAKE_VARS (e.g. SANITIZE=address,undefined), so the
# build under test is the one installed. Prints ok/FAIL lines and
# "# results: P passed, F failed, S skipped".
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/delta-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0 skipped=0
fails=0  # checks failed in the current test
check() {  # check DESCRIPTION COMMAND...: one check of the current test
    local what=$1; shift
    if ! "$@" >>"$tmp/log" 2>&1; then
        echo "  check failed: $what"
        fails=$((fails + 1))
    fi
}
finish() {  # finish NAME: reports the current test
    if [ "$fails" = 0 ]; then echo "ok   $1"; passed=$((passed + 1))
    else echo "FAIL $1 (log below)"; tail -30 "$tmp/log" | sed 's/^/  | /'
        failed=$((failed + 1)); fi
    fails=0; : >"$tmp/log"
}
# make of this checkout, with the build's variables and none of the
# calling make's (its jobserver does not reach us).
mk() {
    # shellcheck disable=SC2086
    env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -C "$root" -s \
        --no-print-directory ${DELTA_MAKE_VARS:-} "$@"
}
# The compiler of the build under test (a sanitized library wants its
# own compiler's runtime).
cc=cc
for v in ${DELTA_MAKE_VARS:-}; do case $v in CC=*) cc=${v#CC=} ;; esac; done
version=$(sed -n 's/.*define DELTA_VERSION_STRING "\(.*\)".*/\1/p' \
    "$root/include/delta/common.h")
major=${version%%.*}

# ---- install into a staging folder, then uninstall ----------------------
stage=$tmp/stage prefix=/opt/delta-test
check "make install DESTDIR" mk install PREFIX=$prefix DESTDIR="$stage"
d=$stage$prefix
check "tool installed" test -x "$d/bin/delta"
for h in "$root"/include/delta/*.h; do
    check "header $(basename "$h")" cmp "$h" "$d/include/delta/$(basename "$h")"
done
check "libdelta.a" test -f "$d/lib/libdelta.a"
check "libdelta.so.$version is a file" test -f "$d/lib/libdelta.so.$version" -a ! -L "$d/lib/libdelta.so.$version"
check "libdelta.so.$major -> libdelta.so.$version" \
    test "$(readlink "$d/lib/libdelta.so.$major")" = "libdelta.so.$version"
check "libdelta.so -> libdelta.so.$major" \
    test "$(readlink "$d/lib/libdelta.so")" = "libdelta.so.$major"
check "soname libdelta.so.$major" \
    grep -q "(SONAME).*\[libdelta.so.$major\]" <(readelf -d "$d/lib/libdelta.so.$version")
pc=$d/lib/pkgconfig/delta.pc
check "delta.pc prefix" grep -qx "prefix=$prefix" "$pc"
check "delta.pc version" grep -qx "Version: $version" "$pc"
check "delta --version" grep -q "^delta $version " <("$d/bin/delta" --version)
finish install_layout

check "make uninstall DESTDIR" mk uninstall PREFIX=$prefix DESTDIR="$stage"
left=$(find "$stage" -type f -o -type l)
check "nothing left after uninstall: $left" test -z "$left"
finish uninstall_removes_all

# ---- the example, built through pkg-config ------------------------------
prefix=$tmp/prefix
check "make install PREFIX" mk install PREFIX="$prefix"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
check "pkg-config --modversion" test "$(pkg-config --modversion delta)" = "$version"
mkdir -p "$tmp/ex"
# as examples/Makefile's header says, the prefix on make's command line
# (GNU make 4.3 does not hand it to $(shell) by itself)
check "examples build (make PKG_CONFIG_PATH=...)" env -u PKG_CONFIG_PATH \
    make -C "$root/examples" -s O="$tmp/ex" CC="$cc" PKG_CONFIG_PATH="$PKG_CONFIG_PATH"
finish example_builds

# run_example FORM: runs the example and checks its summary line
#   first loss F last loss L peak P budget B unconstrained U
run_example() {
    local bin=$tmp/ex/convnet_budget-$1 out
    out=$("$bin" 2>&1)
    check "convnet_budget-$1 exits 0" test $? = 0
    echo "$out" >>"$tmp/log"
    local line
    line=$(echo "$out" | grep '^first loss' | tail -1)
    echo "  $1: $line"
    read -r _ _ first _ _ last _ peak _ budget _ unconstrained <<<"$line"
    check "summary line" test -n "$unconstrained"
    check "loss fell to a tenth ($first -> $last)" \
        awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f / 10) }'
    check "peak $peak within budget $budget" test "$peak" -le "$budget"
    check "budget $budget below the peak $unconstrained" \
        test "$budget" -lt "$unconstrained"
}
if [ -x "$tmp/ex/convnet_budget-shared" ]; then
    run_example shared
    check "shared loads the installed libdelta.so.$major" \
        grep -q "libdelta.so.$major => $prefix/lib/libdelta.so.$major" \
        <(ldd "$tmp/ex/convnet_budget-shared")
    finish example_shared_trains_in_budget
    run_example static
    check "static needs no libdelta.so" \
        bash -c "! ldd '$tmp/ex/convnet_budget-static' | grep -q libdelta"
    finish example_static_trains_in_budget
else
    check "example built" false
    finish example_shared_trains_in_budget
fi

# the built-in model example (delta/train.h): a short run of its shared
# form, its summary line
#   steps N loss L peak P budget B unconstrained U
if [ -x "$tmp/ex/train_builtin-shared" ]; then
    out=$("$tmp/ex/train_builtin-shared" resnet18 12 50 2>&1)
    check "train_builtin-shared exits 0" test $? = 0
    echo "$out" >>"$tmp/log"
    line=$(echo "$out" | grep '^steps' | tail -1)
    echo "  train_builtin: $line"
    read -r _ steps _ loss _ peak _ budget _ unconstrained <<<"$line"
    check "12 steps, a finite loss ($steps, $loss)" \
        awk -v s="$steps" -v l="$loss" 'BEGIN { exit !(s == 12 && l + 0 == l && l > 0) }'
    check "peak $peak within budget $budget" test "$peak" -le "$budget"
    check "budget $budget below the peak $unconstrained" \
        test "$budget" -lt "$unconstrained"
    check "train_builtin-static built" test -x "$tmp/ex/train_builtin-static"
else
    check "train_builtin built" false
fi
finish example_train_builtin

# ---- docs/API.md: every ```c block is a whole program -------------------
mkdir -p "$tmp/api"
awk -v dir="$tmp/api" '
    /^```c$/ { n++; f = sprintf("%s/snippet%02d.c", dir, n); inside = 1; next }
    /^```/ { inside = 0; next }
    inside { print > f }' "$root/docs/API.md"
n=0
for src in "$tmp/api"/snippet*.c; do
    [ -f "$src" ] || continue
    n=$((n + 1))
    bin=${src%.c}
    # shellcheck disable=SC2046
    check "$(basename "$src") compiles" "$cc" -std=c11 -Wall -Wextra -Werror \
        $(pkg-config --cflags delta) -o "$bin" "$src" \
        $(pkg-config --libs delta) -Wl,-rpath,"$prefix/lib"
    [ -x "$bin" ] && check "$(basename "$src") runs" bash -c "cd '$tmp/api' && '$bin'"
done
check "docs/API.md has examples ($n)" test "$n" -ge 5
finish api_doc_examples

# ---- docs/API.md's link commands, as they stand -------------------------
# "Building against delta": the cc lines marked "# shared" and "# static"
# (continuations joined) build its first program as prog.c under this
# prefix; each must run with no LD_LIBRARY_PATH, the shared one loading
# the installed libdelta.so through the rpath the command records.
mkdir -p "$tmp/link"
cp "$tmp/api/snippet01.c" "$tmp/link/prog.c" 2>/dev/null
awk '/^## Building against delta/ { f = 1 } f && /^```sh$/ { i = 1; next }
     i && /^```/ { exit } i' "$root/docs/API.md" |
    sed -e ':a' -e '/\\$/N; s/\\\n//; ta' >"$tmp/link/block.sh"
for form in shared static; do
    cmd=$(grep "^cc .*# $form\$" "$tmp/link/block.sh" | sed 's/#.*//')
    check "API.md has a $form command" test -n "$cmd"
    [ -n "$cmd" ] || continue
    [ "$cc" = cc ] || cmd="$cc ${cmd#cc }"
    rm -f "$tmp/link/prog"
    check "the $form command builds: $cmd" bash -c "cd '$tmp/link' && $cmd"
    check "its program runs" env -u LD_LIBRARY_PATH "$tmp/link/prog"
    if [ $form = shared ]; then
        check "it loads $prefix/lib/libdelta.so.$major" \
            grep -q "libdelta.so.$major => $prefix/lib/libdelta.so.$major" \
            <(env -u LD_LIBRARY_PATH ldd "$tmp/link/prog")
    else
        check "it needs no libdelta.so" \
            bash -c "! ldd '$tmp/link/prog' | grep -q libdelta"
    fi
done
finish api_doc_link_commands

echo "# results: $passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
