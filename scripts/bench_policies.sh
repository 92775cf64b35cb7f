#!/usr/bin/env bash
# make bench-policies: every policy at 90, 70, 50, 40 and 30% of keep's peak,
# side by side on the same runtime, kernels and clock (a benchmark, not a
# test):
#   cpu  ResNet-50 on 3x32x32 images, batch 8, SGD (the default emulated
#        link: one byte per 1,000 GEMM flops, a GPU on PCIe)
#   cpu  GPT-2-shaped, 4 layers, 128 wide, T 64, batch 8, AdamW
#   sim  ResNet-50 224x224 batch 64 and GPT-2 small T 1024 batch 8, AdamW,
#        on a V100-32GB and an A100-80GB
# Per cell: the median step over the steps after the first third (delta
# profiles and tries its modes in its first steps; every policy is measured
# the same way), its overhead against keep with an unlimited budget, the
# peak, and per step the bytes swapped out, ops recomputed and compute
# stalled. A cell a policy cannot run says so. STEPS (default 12) and
# ONLY=cpu|sim narrow it.
set -u
bin=${1:-build/delta}
steps=${STEPS:-12}
only=${ONLY:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
policies="keep swap checkpoint dtr capuchin autoswap delta"
budgets="90% 70% 50% 40% 30%"

run() { # run NAME BUDGET POLICY ARGS...: one cell into $tmp/NAME.POLICY.BUDGET
    local name=$1 budget=$2 policy=$3
    shift 3
    local out="$tmp/$name.$policy.$budget"
    "$bin" train "$@" --steps "$steps" --policy "$policy" --budget "$budget" \
        --quiet --json "$out.jsonl" >/dev/null 2>"$out.err"
    echo $? >"$out.rc"
}

declare -A jobs=(
    [cpu_resnet50]="--model resnet50 --image-size 32 --channels 3 --classes 10 --batch 8 --optimizer sgd --data synthetic"
    [cpu_gpt2]="--model gpt2-tiny --layers 4 --hidden 128 --heads 4 --seq-len 64 --vocab 256 --data synthetic --batch 8 --optimizer adamw"
    [v100_resnet50]="--model resnet50 --batch 64 --backend sim --gpu v100-32g --optimizer adamw"
    [v100_gpt2small]="--model gpt2-small --batch 8 --seq-len 1024 --backend sim --gpu v100-32g --optimizer adamw"
    [a100_resnet50]="--model resnet50 --batch 64 --backend sim --gpu a100-80g --optimizer adamw"
    [a100_gpt2small]="--model gpt2-small --batch 8 --seq-len 1024 --backend sim --gpu a100-80g --optimizer adamw"
)
order="cpu_resnet50 cpu_gpt2 v100_resnet50 v100_gpt2small a100_resnet50 a100_gpt2small"

# a warm-up (caches, clocks, the cpu link's one-off GEMM measurement)
[ "$only" != sim ] && run warmup unlimited keep ${jobs[cpu_gpt2]}
for name in $order; do
    case $name in cpu_*) [ "$only" = sim ] && continue ;; *) [ "$only" = cpu ] && continue ;; esac
    echo "  $name: keep" >&2
    run "$name" unlimited keep ${jobs[$name]}
    for b in $budgets; do
        for p in $policies; do
            [ "$p" = keep ] && continue
            echo "  $name: $p $b" >&2
            run "$name" "$b" "$p" ${jobs[$name]}
        done
    done
done

/usr/bin/python3 - "$tmp" "$policies" "$budgets" "$order" <<'EOF'
import json, os, statistics, sys
tmp, policies, budgets, order = sys.argv[1], sys.argv[2].split()[1:], sys.argv[3].split(), sys.argv[4].split()
labels = {
    "cpu_resnet50": "cpu: ResNet-50, 3x32x32, batch 8, SGD",
    "cpu_gpt2": "cpu: GPT-2 4x128, T 64, batch 8, AdamW",
    "v100_resnet50": "sim V100-32GB: ResNet-50 224x224, batch 64, AdamW",
    "v100_gpt2small": "sim V100-32GB: GPT-2 small T 1024, batch 8, AdamW",
    "a100_resnet50": "sim A100-80GB: ResNet-50 224x224, batch 64, AdamW",
    "a100_gpt2small": "sim A100-80GB: GPT-2 small T 1024, batch 8, AdamW",
}
def cell(name, policy, budget):
    base = os.path.join(tmp, f"{name}.{policy}.{budget}")
    if not os.path.exists(base + ".rc"): return None
    rc = int(open(base + ".rc").read().strip() or 1)
    steps, summ = [], None
    if os.path.exists(base + ".jsonl"):
        for line in open(base + ".jsonl"):
            d = json.loads(line)
            if "summary" in d: summ = d["summary"]
            elif "step" in d: steps.append(d)
    if rc != 0 or not steps: return {"rc": rc}
    tail = steps[len(steps) // 3:]
    return {"rc": 0, "s": statistics.median(d["step_s"] for d in tail),
            "peak": max(d["peak_device_bytes"] for d in steps),
            "out": statistics.mean(d["swap_out_bytes"] for d in tail),
            "rec": statistics.mean(d["recomputed_ops"] for d in tail),
            "stall": statistics.mean(d["stall_s"] for d in tail)}
for name in order:
    keep = cell(name, "keep", "unlimited")
    if keep is None: continue
    print(f"\n### {labels[name]}\n")
    if keep["rc"] != 0:
        print("keep failed\n"); continue
    k = keep["s"]
    print(f"keep, unlimited budget: {k:.4f} s/step, peak {keep['peak'] / 2**20:.0f} MiB\n")
    print("overhead (median step / keep's):\n")
    print("| policy | " + " | ".join(budgets) + " |")
    print("|---|" + "---|" * len(budgets))
    for p in policies:
        row = []
        for b in budgets:
            c = cell(name, p, b)
            if c is None: row.append("")
            elif c["rc"] == 3: row.append("refused")
            elif c["rc"] != 0: row.append(f"exit {c['rc']}")
            else: row.append(f"{c['s'] / k:.2f}x")
        print(f"| {p} | " + " | ".join(row) + " |")
    print("\ndelta per step (swapped out MiB / recomputed ops / stall s):",
          ", ".join(f"{b} " + (f"{c['out'] / 2**20:.0f}/{c['rec']:.0f}/{c['stall']:.3f}" if c and c["rc"] == 0 else "-")
                    for b in budgets for c in [cell(name, "delta", b)]))
EOF
