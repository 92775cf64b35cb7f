#!/usr/bin/env bash
# make bench-cuda: delta on an NVIDIA GPU (a benchmark, not a test; needs a
# GPU, the CUDA build of delta and python3 with torch + torchvision):
#   1. ResNet-50 (3x224x224, batch 64, SGD) and GPT-2 small (T 1024, batch 8,
#      AdamW) step time with keep against PyTorch on the same GPU, both fp32
#      with TF32 off (scripts/bench_cuda_torch.py); goal: keep within 1.3x;
#   2. overhead per policy at 70, 50 and 30% of keep's peak, beside the
#      simulator's prediction for the same runs; goal: predicted within 15%
#      of measured. The simulator gets this GPU's calibration (`delta
#      calibrate --backend cuda --precision $PRECISION`, run first,
#      --gpu-file) when it succeeds,
#      else the preset SIM_GPU (default h200-141g); the tables say which;
#   3. the largest batch keep and delta fit in MB_BUDGET (default 8GiB) of
#      the GPU, and the simulator's answer for the same memory.
# A cell is the median step over the steps after the first third (delta
# tries its modes in its first steps). Writes the tables to OUT (default
# build/bench_cuda.md), ready for docs/RESULTS.md, and prints them.
# PRECISION=bf16 runs both sides in bf16 (delta --precision bf16, PyTorch
# autocast bf16); STEPS (default 16: delta measures its second full plan
# when the first misses its prediction, up to its ninth step), POLICIES, BUDGETS, ONLY=resnet50|gpt2 narrow it;
# MAXBATCH=0 skips part 3; CELLS=DIR keeps the raw cells;
# PYTHON picks the python whose torch has CUDA (default: python3 on PATH).
# Last, PyTorch's own memory tools beside delta at its budgets (block below).
set -u
bin=${1:-build/delta}
steps=${STEPS:-16}
out=${OUT:-build/bench_cuda.md}
sim_gpu=${SIM_GPU:-h200-141g}
policies=${POLICIES:-"delta swap checkpoint dtr capuchin autoswap"}
budgets=${BUDGETS:-"70% 50% 30%"}
only=${ONLY:-}
maxbatch=${MAXBATCH:-1}
export PRECISION=${PRECISION:-fp32}  # the tables' python reads it too
case $PRECISION in
fp32|bf16) ;;
*) echo "bench-cuda: PRECISION is fp32 or bf16, not '$PRECISION'" >&2; exit 2 ;;
esac
py=${PYTHON:-python3}  # a python with a CUDA build of torch (Debian's is cpu-only)
here=$(cd "$(dirname "$0")" && pwd)
# CELLS=DIR keeps every cell's output there (a run cut short keeps what it
# measured, and the tables can be made again from it); else a temporary dir
if [ -n "${CELLS:-}" ]; then
    tmp=$CELLS
    mkdir -p "$tmp" || exit 1
else
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
fi

# Is there a GPU, and a delta that can use it?
if ! "$bin" train --model mlp --batch 8 --steps 1 --data synthetic \
        --backend cuda --quiet >"$tmp/probe" 2>&1; then
    echo "bench-cuda: delta cannot train on a GPU here:" >&2
    cat "$tmp/probe" >&2
    exit 1
fi
device=$(nvidia-smi --query-gpu=name,memory.total,driver_version \
             --format=csv,noheader 2>/dev/null | head -1)
[ -n "$device" ] || device="(nvidia-smi not found)"

# The simulator's device: this GPU as delta calibrate measures it, else the
# preset (CALIBRATE=0 skips the calibration)
sim_dev="--gpu $sim_gpu"
sim_name="the $sim_gpu preset"
if [ "${CALIBRATE:-1}" != 0 ]; then
    echo "  calibrating the GPU (delta calibrate --backend cuda)" >&2
    if "$bin" calibrate --backend cuda --precision "$PRECISION" --out "$tmp/h.json" >"$tmp/calibrate.txt" \
            2>"$tmp/calibrate.err"; then
        sim_dev="--gpu-file $tmp/h.json"
        sim_name="this GPU as delta calibrate measured it, --gpu-file"
    else
        echo "  calibrate failed ($(tail -1 "$tmp/calibrate.err")); the simulator uses $sim_gpu" >&2
    fi
fi

declare -A jobs=(
    [resnet50]="--model resnet50 --image-size 224 --channels 3 --classes 1000 --data synthetic --optimizer sgd --precision $PRECISION"
    [gpt2]="--model gpt2-small --seq-len 1024 --data synthetic --optimizer adamw --precision $PRECISION"
)
# the batch apart: maxbatch searches it
declare -A batch=([resnet50]=64 [gpt2]=8)
declare -A torch_args=([resnet50]="resnet50 ${batch[resnet50]} $steps --precision $PRECISION" [gpt2]="gpt2 ${batch[gpt2]} 1024 $steps --precision $PRECISION")
order="resnet50 gpt2"

run() { # run NAME BACKEND BUDGET POLICY: one cell into $tmp/NAME.BACKEND.POLICY.BUDGET
    local name=$1 be=$2 budget=$3 policy=$4 extra=""
    [ "$be" = sim ] && extra="--backend sim $sim_dev" || extra="--backend cuda"
    local cell="$tmp/$name.$be.$policy.$budget"
    echo "  $name $be $policy $budget" >&2
    "$bin" train ${jobs[$name]} --batch "${batch[$name]}" $extra --steps "$steps" --policy "$policy" \
        --budget "$budget" --quiet --json "$cell.jsonl" >/dev/null 2>"$cell.err"
    local rc=$?
    # keep on the GPU also leaves a trace (where its step goes, per op
    # type), from a run of its own: tracing costs host time, which a
    # host-bound step (BF16 ResNet-50 on an H200: 36 ms traced, 28 not)
    # would add to the timed cell
    if [ "$be" = cuda ] && [ "$policy" = keep ] && [ $rc = 0 ]; then
        "$bin" train ${jobs[$name]} --batch "${batch[$name]}" $extra --steps 6 \
            --policy keep --quiet --trace "$cell.trace.json" >/dev/null 2>&1 &&
            $py "$here/trace_ops.py" "$cell.trace.json" >"$tmp/$name.ops" 2>&1
    fi
    echo $rc >"$cell.rc"
    # progress, so a run cut short still shows what it measured
    echo "    rc $rc $(grep -o '"median_step_s":[0-9.e-]*' "$cell.jsonl" 2>/dev/null | tail -1)" >&2
}

for name in $order; do
    [ -n "$only" ] && [ "$only" != "$name" ] && continue
    echo "  $name: pytorch" >&2
    $py "$here/bench_cuda_torch.py" ${torch_args[$name]} >"$tmp/$name.torch" \
        2>"$tmp/$name.torch.err" || echo "  pytorch failed: $(tail -1 "$tmp/$name.torch.err")" >&2
    for be in cuda sim; do
        run "$name" "$be" unlimited keep
        for b in $budgets; do
            for p in $policies; do run "$name" "$be" "$b" "$p"; done
        done
    done
    # the largest batch, where delta has the command
    if [ "$maxbatch" != 0 ] && "$bin" maxbatch --help >/dev/null 2>&1; then
        # probes train for real on the GPU: search a share of it
        # (MB_BUDGET), with the simulator given the same memory
        for be in cuda sim; do
            echo "  $name maxbatch $be" >&2
            dev="--backend cuda"
            [ "$be" = sim ] && dev="--backend sim $sim_dev"
            # shellcheck disable=SC2086 # the options are words
            "$bin" maxbatch ${jobs[$name]} \
                $dev --budget "${MB_BUDGET:-8GiB}" --steps "${MB_STEPS:-6}" \
                --policies keep,delta --quiet \
                >"$tmp/$name.maxbatch.$be" 2>&1
        done
    fi
done

$py - "$tmp" "$policies" "$budgets" "$order" "$device" "$sim_name" "$only" <<'PY' | tee "$out"
import json, os, statistics, sys
tmp, policies, budgets, order, device, sim_gpu, only = sys.argv[1:8]
policies, budgets, order = policies.split(), budgets.split(), order.split()
labels = {"resnet50": "ResNet-50, 3x224x224, batch 64, SGD",
          "gpt2": "GPT-2 small, T 1024, batch 8, AdamW"}

def cell(name, be, policy, budget):
    base = os.path.join(tmp, f"{name}.{be}.{policy}.{budget}")
    if not os.path.exists(base + ".rc"): return None
    rc = int(open(base + ".rc").read().strip() or 1)
    steps = []
    if os.path.exists(base + ".jsonl"):
        for line in open(base + ".jsonl"):
            d = json.loads(line)
            if "step" in d and "step_s" in d: steps.append(d)
    if rc != 0 or not steps:
        err = open(base + ".err").read().strip().splitlines() if os.path.exists(base + ".err") else []
        return {"rc": rc, "err": err[-1] if err else ""}
    tail = steps[len(steps) // 3:]
    return {"rc": 0, "s": statistics.median(d["step_s"] for d in tail),
            "peak": max(d["peak_device_bytes"] for d in steps)}

def torch_of(name):
    f = os.path.join(tmp, name + ".torch")
    r = {}
    if os.path.exists(f):
        for line in open(f):
            k, _, v = line.strip().partition(" ")
            r[k] = v
    return r

def show(c, keep):
    if c is None: return ""
    if c["rc"] == 3: return "refused"
    if c["rc"] != 0: return f"exit {c['rc']}"
    return f"{c['s'] / keep:.2f}x"

print(f"## delta on {device}\n")
prec = ("bf16 (delta --precision bf16, PyTorch autocast bf16)"
        if os.environ.get("PRECISION") == "bf16" else "fp32, TF32 off")
print(f"delta's cuda backend against PyTorch ({prec}) on the same GPU, "
      f"and the simulator ({sim_gpu}) predicting the same runs. "
      f"`make bench-cuda`; median step after the first third of the steps.\n")
print("| model | PyTorch s/step | delta keep s/step | ratio (goal <= 1.3) | delta keep peak | PyTorch peak | sim keep s/step |")
print("|---|---|---|---|---|---|---|")
for name in order:
    if only and only != name: continue
    t, k, s = torch_of(name), cell(name, "cuda", "keep", "unlimited"), cell(name, "sim", "keep", "unlimited")
    ts = float(t["step_s"]) if "step_s" in t else None
    ks = k["s"] if k and k["rc"] == 0 else None
    row = [labels[name], f"{ts:.4f}" if ts else "failed", f"{ks:.4f}" if ks else f"failed ({k and k.get('err', '')})",
           f"{ks / ts:.2f}x" if ts and ks else "", f"{k['peak'] / 2**30:.2f} GiB" if ks else "",
           f"{int(t['peak_bytes']) / 2**30:.2f} GiB" if "peak_bytes" in t else "",
           f"{s['s']:.4f}" if s and s["rc"] == 0 else ""]
    print("| " + " | ".join(row) + " |")
for name in order:
    if only and only != name: continue
    kc, ks = cell(name, "cuda", "keep", "unlimited"), cell(name, "sim", "keep", "unlimited")
    if not kc or kc["rc"] != 0 or not ks or ks["rc"] != 0: continue
    print(f"\n### {labels[name]}: overhead against keep, measured (sim predicted, error)\n")
    print("| policy | " + " | ".join(budgets) + " |")
    print("|---|" + "---|" * len(budgets))
    errs = []
    for p in policies:
        row = []
        for b in budgets:
            m, s = cell(name, "cuda", p, b), cell(name, "sim", p, b)
            txt = show(m, kc["s"])
            if m and m["rc"] == 0 and s and s["rc"] == 0:
                om, os_ = m["s"] / kc["s"], s["s"] / ks["s"]
                e = abs(os_ - om) / om
                errs.append(e)
                txt += f" ({os_:.2f}x, {e * 100:.0f}%)"
            elif s is not None:
                txt += f" ({show(s, ks['s'])})"
            row.append(txt)
        print(f"| {p} | " + " | ".join(row) + " |")
    if errs:
        print(f"\nsimulator error on the overhead: mean {statistics.mean(errs) * 100:.0f}%, "
              f"worst {max(errs) * 100:.0f}%, within 15% in {sum(e <= 0.15 for e in errs)} of {len(errs)} cells")
for name in order:
    f = os.path.join(tmp, name + ".ops")
    if os.path.exists(f):
        print(f"\n### {labels[name]}: where keep's step goes on the GPU "
              "(`scripts/trace_ops.py`, the last step)\n")
        print("```\n" + "\n".join(open(f).read().strip().splitlines()[:16]) + "\n```")
cal = os.path.join(tmp, "calibrate.txt")
if sim_gpu.startswith("this GPU") and os.path.exists(cal):
    print("\n### the simulator's device: `delta calibrate --backend cuda` on this GPU\n")
    print("```\n" + open(cal).read().strip() + "\n```")
mb = [f for f in sorted(os.listdir(tmp)) if ".maxbatch." in f]
if mb:
    print("\n### largest batch (`delta maxbatch`, keep and delta), measured and simulated\n")
    for f in mb:
        name, _, be = f.partition(".maxbatch.")
        print(f"{labels.get(name, name)}, {'the GPU' if be == 'cuda' else 'the simulator'}:\n")
        print("```\n" + open(os.path.join(tmp, f)).read().strip() + "\n```\n")
PY
# What users would pick instead (scripts/bench_cuda_peers.py): PyTorch on the
# same jobs and GPU with torch.utils.checkpoint per block, and torch.compile at
# each activation_memory_budget of TORCH_AMB (default 1.0 0.6 0.3 0.1 0.0),
# each in its own process (TORCH_TIMEOUT s at most, default 900); then, at each
# of delta's budgets, delta's fastest policy against the fastest PyTorch
# configuration whose measured peak fits. PEERS=0 skips it.
if [ "${PEERS:-1}" != 0 ]; then
    for name in $order; do
        [ -n "$only" ] && [ "$only" != "$name" ] && continue
        echo "  $name: pytorch checkpoint and torch.compile" >&2
        $py "$here/bench_cuda_peers.py" run ${torch_args[$name]} --modes "checkpoint compile" \
            ${TORCH_AMB:+--amb "$TORCH_AMB"} --timeout "${TORCH_TIMEOUT:-900}" \
            2>"$tmp/$name.peers.err" | tee "$tmp/$name.peers" | sed 's/^/    /' >&2
    done
    $py "$here/bench_cuda_peers.py" report "$tmp" --models "$order" --budgets "$budgets" \
        --policies "$policies" --only "$only" | tee -a "$out"
fi
echo "bench-cuda: written to $out" >&2
