#!/usr/bin/env bash
# make bench-kernels: runs the C kernel benchmark and, where Debian's
# python3-torch is installed, PyTorch on the same shapes and threads, and
# prints them side by side with the ratio delta / PyTorch (higher is better
# for delta; the goal is >= 0.67, i.e. within 1.5x).
set -eu
bin=$1
threads=${THREADS:-2}
reps=${REPS:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "kernel benchmark: $threads threads, median of $reps runs, GFLOP/s"
"$bin" --threads "$threads" --reps "$reps" >"$tmp/delta.txt"
py=/usr/bin/python3
if $py -c 'import torch' 2>/dev/null; then
    "$bin" --list | $py scripts/bench_kernels_torch.py "$threads" "$reps" >"$tmp/torch.txt"
else
    echo "(python3-torch not installed: delta's figures only)"
    : >"$tmp/torch.txt"
fi
awk 'NR == FNR { t[$1 " " $2] = $3; next }
     FNR == 1 { printf "%-20s %-4s %10s %10s %8s\n", "shape", "op", "delta", "pytorch", "ratio" }
     { k = $1 " " $2
       if (k in t) printf "%-20s %-4s %10.1f %10.1f %8.2f\n", $1, $2, $3, t[k], $3 / t[k]
       else printf "%-20s %-4s %10.1f %10s %8s\n", $1, $2, $3, "-", "-" }' \
    "$tmp/torch.txt" "$tmp/delta.txt"
