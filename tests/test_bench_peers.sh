#!/usr/bin/env bash
# make bench-cuda's PyTorch side without a GPU (scripts/bench_cuda_peers.py,
# scripts/bench_cuda_torch.py):
#  - the table: from made-up cells, at each of delta's budgets the fastest
#    PyTorch configuration whose peak fits is the opponent (a faster one over
#    the budget is not), eager counts, and the yes/no follows the steps;
#  - the sweep: tiny ResNet-50 and GPT-2 on the cpu with Debian's
#    /usr/bin/python3 run eager and checkpoint to a step time and a peak, and
#    torch.compile either runs or says once why this torch cannot (1.13 has
#    no torch.compile); skipped without python3-torch (ResNet-50 also needs
#    python3-torchvision).
# Prints ok/FAIL lines and "# results: P passed, F failed, S skipped".
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
peers=$root/scripts/bench_cuda_peers.py
py=/usr/bin/python3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/delta-peers.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0 skipped=0
check() {  # check NAME FILE PATTERN: FILE has a line matching PATTERN (grep -E)
    if grep -qE -- "$3" "$2"; then echo "ok   $1"; passed=$((passed + 1))
    else echo "FAIL $1: no line matches /$3/ in:"; sed 's/^/  /' "$2" | head -30
        failed=$((failed + 1)); fi
}

# ---- the table, from made-up cells (GiB: keep's peak 10) --------------------
cells=$tmp/cells
mkdir -p "$cells"
G=1073741824
cell() {  # cell POLICY BUDGET RC [STEP_S PEAK_GIB BUDGET_GIB]
    local f=$cells/m.cuda.$1.$2
    echo "$3" >"$f.rc"
    [ $# -gt 3 ] || return 0
    for i in 1 2 3 4 5 6; do
        echo "{\"step\":$i,\"step_s\":$4,\"peak_device_bytes\":$(awk "BEGIN{print int($5*$G)}"),\"budget_bytes\":$(awk "BEGIN{print int($6*$G)}"),\"baseline_peak_bytes\":$((10 * G))}"
    done >"$f.jsonl"
}
cell keep unlimited 0 0.20 10 10
cell delta 70% 0 0.22 6.9 7
cell swap 70% 3
cell delta 50% 0 0.25 4.9 5
cell delta 30% 0 0.29 2.9 3
printf 'step_s 0.19\npeak_bytes %d\n' $((19 * G / 2)) >"$cells/m.torch"
cat >"$cells/m.peers" <<EOF
config checkpoint step_s 0.26 peak_bytes $((4 * G)) first_step_s 2
config compile@1.0 step_s 0.17 peak_bytes $((8 * G)) compile_s 60
config compile@0.6 step_s 0.18 peak_bytes $((68 * G / 10)) compile_s 50
config compile@0.3 failed: exit 1: BackendCompilerFailed
EOF
if "$py" "$peers" report "$cells" --models m --budgets "70% 50% 30%" \
        --policies "delta swap" >"$tmp/report" 2>&1; then
    check "70%: compile's fastest fitting budget is 0.6, not the faster 1.0 over it" "$tmp/report" \
        '^\| 70% \(7\.00 GiB\) \| delta: 0\.2200 s, 6\.90 GiB \| 0\.2600 s, 4\.00 GiB \| 0\.6: 0\.1800 s, 6\.80 GiB \| compile@0\.6: .* \| no '
    check "50%: no compile budget fits; checkpoint is the opponent, delta faster" "$tmp/report" \
        '^\| 50% .* \| none fits \(lowest peak 6\.80 GiB\) \| checkpoint: 0\.2600 s, 4\.00 GiB \| yes '
    check "30%: checkpoint over the budget, no PyTorch configuration fits" "$tmp/report" \
        '^\| 30% .* 4\.00 GiB \(over budget\) \| .* \| none \| yes \(no PyTorch configuration fits\) \|$'
    check "eager from MODEL.torch and a failed budget are listed" "$tmp/report" \
        '^\| compile@0\.3 \| failed: exit 1: BackendCompilerFailed'
    check "eager is listed" "$tmp/report" '^\| eager \| 0\.1900 \| 9\.50 GiB'
else
    echo "FAIL report exited $?:"; sed 's/^/  /' "$tmp/report"; failed=$((failed + 1))
fi

# ---- the sweep, tiny, on the cpu ---------------------------------------------
ran() {  # ran NAME FILE: each mode gave a step and a peak, or compile said why not
    check "$1: eager" "$2" '^config eager step_s [0-9.]+ peak_bytes [1-9][0-9]* first_step_s'
    check "$1: checkpoint" "$2" '^config checkpoint step_s [0-9.]+ peak_bytes [1-9][0-9]* first_step_s'
    check "$1: compile ran or cannot here" "$2" \
        '^config compile@0\.5 step_s [0-9.]+ peak_bytes [1-9][0-9]* compile_s|^config compile failed: '
}
if ! "$py" -c 'import torch' >/dev/null 2>&1; then
    echo "skip the cpu sweep: no PyTorch in $py (package python3-torch)"
    skipped=$((skipped + 1))
else
    "$py" "$peers" run gpt2 2 32 3 --device cpu --layers 2 --width 64 --heads 2 --vocab 256 \
        --amb 0.5 --timeout 120 >"$tmp/gpt2" 2>&1
    ran gpt2 "$tmp/gpt2"
    if ! "$py" -c 'import torchvision' >/dev/null 2>&1; then
        echo "skip resnet50 on the cpu: no torchvision in $py (package python3-torchvision)"
        skipped=$((skipped + 1))
    else
        # compile is gpt2's to try: a ResNet-50's takes minutes on a cpu
        "$py" "$peers" run resnet50 2 3 --device cpu --image-size 32 --classes 10 \
            --modes eager,checkpoint --timeout 120 >"$tmp/resnet50" 2>&1
        check "resnet50: eager" "$tmp/resnet50" '^config eager step_s [0-9.]+ peak_bytes [1-9]'
        check "resnet50: checkpoint" "$tmp/resnet50" '^config checkpoint step_s [0-9.]+ peak_bytes [1-9]'
    fi
fi
echo "# results: $passed passed, $failed failed, $skipped skipped"
[ "$failed" = 0 ]
