#!/usr/bin/env bash
# make bench-policies: every policy at 100, 70 and 50% of keep's peak, side by
# side on the same runtime, kernels and clock (a benchmark, not a test):
#   cpu  ResNet-18 (width 16) on 1x28x28 images, batch 64, SGD
#   cpu  GPT-2-shaped, 4 layers, 128 wide, T 64, batch 8, AdamW
#   sim  ResNet-50 224x224 batch 64 and GPT-2 small T 1024 batch 8 on an
#        A100-80GB (AdamW)
# Per cell: the median step, its overhead against keep with an unlimited
# budget, the peak, bytes swapped out, ops recomputed and compute stalled,
# blocks moved to make gaps per step after the first, and how many steps
# after the first took every allocation from the replayed layout.
# The cpu link is the default emulation (one byte per 1,000 GEMM flops, a
# GPU on PCIe). A cell a policy cannot run says why in one word.
set -u
bin=${1:-build/delta}
steps=${STEPS:-8}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
policies="keep swap checkpoint dtr capuchin autoswap"

run() { # run NAME BUDGET POLICY ARGS...: one cell into $tmp/NAME.POLICY.BUDGET
    local name=$1 budget=$2 policy=$3
    shift 3
    local out="$tmp/$name.$policy.$budget"
    "$bin" train "$@" --steps "$steps" --policy "$policy" --budget "$budget" \
        --quiet --json "$out.jsonl" >/dev/null 2>"$out.err"
    echo $? >"$out.rc"
}

cpu_r="--model resnet18 --width 16 --channels 1 --image-size 28 --classes 10 --batch 64 --optimizer sgd --data synthetic"
cpu_g="--model gpt2-tiny --layers 4 --hidden 128 --heads 4 --seq-len 64 --vocab 256 --data synthetic --batch 8 --optimizer adamw"
sim_r="--model resnet50 --batch 64 --backend sim --gpu a100-80g --optimizer adamw"
sim_g="--model gpt2-small --batch 8 --seq-len 1024 --backend sim --gpu a100-80g --optimizer adamw"

# a warm-up (caches, clocks, the cpu link's one-off GEMM measurement)
run warmup unlimited keep $cpu_g
for b in unlimited 100% 70% 50%; do
    for p in $policies; do
        [ "$b" = unlimited ] && [ "$p" != keep ] && continue
        [ "$b" != unlimited ] && [ "$p" = keep ] && continue
        echo "  cpu resnet18 $p $b" >&2; run cpu_resnet18 "$b" "$p" $cpu_r
        echo "  cpu gpt2 $p $b" >&2; run cpu_gpt2 "$b" "$p" $cpu_g
        echo "  sim resnet50 $p $b" >&2; run sim_resnet50 "$b" "$p" $sim_r
        echo "  sim gpt2-small $p $b" >&2; run sim_gpt2small "$b" "$p" $sim_g
    done
done

/usr/bin/python3 - "$tmp" "$policies" <<'EOF'
import json, os, sys
tmp, policies = sys.argv[1], sys.argv[2].split()
def cell(name, policy, budget):
    base = os.path.join(tmp, f"{name}.{policy}.{budget}")
    rc = int(open(base + ".rc").read().strip() or 1)
    summ, steps = None, []
    if os.path.exists(base + ".jsonl"):
        for line in open(base + ".jsonl"):
            d = json.loads(line)
            if "summary" in d: summ = d["summary"]
            else: steps.append(d)
    if summ is not None: summ["_steps"] = steps
    return rc, summ
def later(s):
    # moves per step and replayed steps, over the steps after the first
    rest = s["_steps"][1:]
    if not rest: return "", ""
    moved = sum(d.get("defrag_moves", 0) for d in rest) / len(rest)
    rep = [d["replayed"] for d in rest if "replayed" in d]
    return f"{moved:.0f}", (f"{sum(rep)}/{len(rest)}" if rep else "-")
def mib(b): return f"{b / 2**20:.1f}"
for name, label in [("cpu_resnet18", "cpu ResNet-18 w16, 1x28x28, batch 64"),
                    ("cpu_gpt2", "cpu GPT-2 4x128, T 64, batch 8"),
                    ("sim_resnet50", "sim A100-80GB ResNet-50 224, batch 64"),
                    ("sim_gpt2small", "sim A100-80GB GPT-2 small T 1024, batch 8")]:
    rc, keep = cell(name, "keep", "unlimited")
    if not keep:
        print(f"\n{label}: keep failed"); continue
    k = keep["median_step_s"]
    print(f"\n### {label}\n")
    print(f"keep, unlimited: {k:.4f} s/step, peak {mib(keep['peak_device_bytes'])} MiB\n")
    print("| policy | budget | s/step | overhead | peak MiB | swapped out MiB | recomputed ops | stall s | moved/step | replayed |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for b in ["100%", "70%", "50%"]:
        for p in policies[1:]:
            rc, s = cell(name, p, b)
            if rc != 0 or not s:
                why = "infeasible" if rc == 3 else f"exit {rc}"
                print(f"| {p} | {b} | {why} | | | | | | | |"); continue
            st = s["median_step_s"]; n = max(1, s["steps"])
            moved, rep = later(s)
            print(f"| {p} | {b} | {st:.4f} | {st / k:.2f}x | {mib(s['peak_device_bytes'])} | "
                  f"{mib(s['swap_out_bytes'] / n)} | {s['recomputed_ops'] // n} | {s['stall_s'] / n:.4f} | "
                  f"{moved} | {rep} |")
EOF
