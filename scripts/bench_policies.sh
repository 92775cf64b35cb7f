#!/usr/bin/env bash
# make bench-policies: every policy at 90, 70, 50, 40 and 30% of keep's peak,
# side by side on the same runtime, kernels and clock (a benchmark, not a
# test):
#   cpu  ResNet-50 on 3x32x32 images, batch 8, SGD (the default emulated
#        link: one byte per 1,000 GEMM flops, a GPU on PCIe)
#   cpu  GPT-2-shaped, 4 layers, 128 wide, T 64, batch 8, AdamW
#   sim  ResNet-50 224x224 batch 64 and GPT-2 small T 1024 batch 8, AdamW,
#        on a V100-32GB and an A100-80GB
#   sim  the cpu's ResNet-50 (3x32x32, batch 8, SGD) on the V100: the same
#        link-bound regime as on the cpu (parameters and optimizer state
#        over the link, compute a few ms), but deterministic
# Each configuration is one `delta bench` grid (docs/BENCH.md); this prints
# its results.md under the label docs/POLICIES.md uses. Per cell: the
# median step over the steps after the first third (delta profiles and
# tries its modes in its first steps; every policy is measured the same
# way), its overhead against keep with an unlimited budget, the peak, and
# per step the bytes swapped out, ops recomputed and compute stalled.
# "refused": the budget cannot hold the policy's step; "fail": the run
# failed otherwise. The cpu grids run REPEAT (default 3) rounds and keep
# each cell's median run (`delta bench --repeat`): the cores are shared and
# one run of a cell can be 50% slow; the sim is deterministic and runs once.
# STEPS (default 12) and ONLY=cpu|sim narrow it; OUT=DIR
# keeps the grids' full results (CSV, plots) instead of a temporary folder.
set -u
bin=${1:-build/delta}
steps=${STEPS:-12}
only=${ONLY:-}
repeat=${REPEAT:-3}
# shellcheck source=scripts/bench_out.sh
. "$(dirname "$0")/bench_out.sh"
policies="swap,checkpoint,dtr,capuchin,autoswap,delta"
budgets="90%,70%,50%,40%,30%"

declare -A jobs=(
    [cpu_resnet50]="--model resnet50 --image-size 32 --channels 3 --classes 10 --batch 8 --optimizer sgd --data synthetic"
    [cpu_gpt2]="--model gpt2-tiny --layers 4 --hidden 128 --heads 4 --seq-len 64 --vocab 256 --data synthetic --batch 8 --optimizer adamw"
    [v100_resnet50]="--model resnet50 --batch 64 --backend sim --gpu v100-32g --optimizer adamw"
    [v100_gpt2small]="--model gpt2-small --batch 8 --seq-len 1024 --backend sim --gpu v100-32g --optimizer adamw"
    [a100_resnet50]="--model resnet50 --batch 64 --backend sim --gpu a100-80g --optimizer adamw"
    [a100_gpt2small]="--model gpt2-small --batch 8 --seq-len 1024 --backend sim --gpu a100-80g --optimizer adamw"
    [v100_resnet50_small]="--model resnet50 --image-size 32 --channels 3 --classes 10 --batch 8 --optimizer sgd --data synthetic --backend sim --gpu v100-32g"
)
declare -A labels=(
    [cpu_resnet50]="cpu: ResNet-50, 3x32x32, batch 8, SGD"
    [cpu_gpt2]="cpu: GPT-2 4x128, T 64, batch 8, AdamW"
    [v100_resnet50]="sim V100-32GB: ResNet-50 224x224, batch 64, AdamW"
    [v100_gpt2small]="sim V100-32GB: GPT-2 small T 1024, batch 8, AdamW"
    [a100_resnet50]="sim A100-80GB: ResNet-50 224x224, batch 64, AdamW"
    [a100_gpt2small]="sim A100-80GB: GPT-2 small T 1024, batch 8, AdamW"
    [v100_resnet50_small]="sim V100-32GB, link-bound: ResNet-50 3x32x32, batch 8, SGD"
)
order="cpu_resnet50 cpu_gpt2 v100_resnet50 v100_gpt2small a100_resnet50 a100_gpt2small v100_resnet50_small"

# a warm-up (caches, clocks)
[ "$only" != sim ] && "$bin" train ${jobs[cpu_gpt2]} --steps "$steps" --quiet >/dev/null 2>&1
for name in $order; do
    case $name in cpu_*) [ "$only" = sim ] && continue ;; *) [ "$only" = cpu ] && continue ;; esac
    echo "  $name" >&2
    rep=1
    case $name in cpu_*) rep=$repeat ;; esac
    # shellcheck disable=SC2086 # the job's options are words
    if ! "$bin" bench ${jobs[$name]} --policies "$policies" --budgets "$budgets" \
        --steps "$steps" --repeat "$rep" --timeline-budget none --out "$out/$name" \
        2>"$out/$name.err"; then
        printf '\n### %s\n\ndelta bench failed: %s\n' "${labels[$name]}" "$(tail -1 "$out/$name.err")"
        continue
    fi
    echo
    sed -n '/^### /,$p' "$out/$name/results.md" | sed "1s|^### .*|### ${labels[$name]}|"
done
