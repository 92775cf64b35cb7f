#!/usr/bin/env bash
# make bench-sim-fidelity: does the simulator, given the cpu's calibration,
# predict the cpu backend? (a benchmark, not a test: nothing is asserted)
#   1. delta calibrate --backend cpu writes the cpu's device file (its
#      figures, curves, and factors per op type from keep steps of its own
#      two small programs: resnet18 width 8 batch 16, gpt2-tiny 2x128 batch
#      4);
#   2. a grid on two other shapes of those models (resnet18 width 16 batch
#      16 on 3x32x32; GPT-2 4x128, T 64, batch 8, as make bench-policies'
#      cpu grid), each cell run on the cpu for real and on the simulator
#      with the file (--backend sim --gpu-file): keep with no budget at the
#      batch and at twice it, and three policies at BUDGETS of keep's peak:
#      delta, dtr and swap on GPT-2; delta, capuchin and autoswap on the
#      ResNet (dtr, swap and checkpoint cannot hold a small ResNet's step in
#      any of these budgets: docs/POLICIES.md's cpu grid);
#   3. per cell the measured and the predicted step and the error; for the
#      policies also the overhead against keep, measured and predicted, and
#      its error; then "within 20% in X of Y cells" for keep's steps and
#      "within 15%" for the overheads.
# The cpu's link is pinned: its default (one byte per 1,000 GEMM flops) is
# set from a GEMM timed when each process starts, so it moves with the
# machine's load from one run to the next. The calibration and every cpu
# cell run at LINK GB/s (--link-bw; default 0.08: 1,000 flops a byte at
# the ~80 GFLOP/s this 2-core machine's GEMM reaches unloaded).
# A cell is the median step over the steps after the first third. STEPS
# (default 12), BUDGETS (default "90% 70% 50%"), POLICIES (every model's
# instead of its three), THREADS (the cpu's threads, default 1; 0: all
# cores. With two threads on a 2-core machine shared with other work, every
# parallel kernel waits at its barrier for whichever thread another
# process's burst holds, a scheduler slice of a few ms: a 128^3 GEMM took
# 4.6 ms instead of 0.02, and a calibration taken in such a burst is off by
# tens; one thread is slowed only in proportion), REPEAT (default 1: cpu
# cells run that many times, the median
# kept), OUT=DIR keeps the cells and the device file (else a temporary
# folder). Prints the table (and writes it to DIR/fidelity.md with OUT).
set -u
bin=${1:-build/delta}
steps=${STEPS:-12}
budgets=${BUDGETS:-"90% 70% 50%"}
repeat=${REPEAT:-1}
# OUT=DIR keeps everything; else a temporary folder, removed at the end
tmp=${OUT:-$(mktemp -d)}
[ -n "${OUT:-}" ] || trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp" || exit 1
t0=$(date +%s)

declare -A jobs=(
    [resnet18]="--model resnet18 --width 16 --image-size 32 --channels 3 --classes 10 --optimizer sgd --data synthetic"
    [gpt2]="--model gpt2-tiny --layers 4 --hidden 128 --heads 4 --seq-len 64 --vocab 256 --optimizer adamw --data synthetic"
)
declare -A batch=([resnet18]=16 [gpt2]=8)
declare -A policies=([resnet18]="${POLICIES:-delta capuchin autoswap}"
                     [gpt2]="${POLICIES:-delta dtr swap}")
order="resnet18 gpt2"

gbps=${LINK:-0.08}
threads=(--threads "${THREADS:-1}")
[ "${THREADS:-1}" = 0 ] && threads=()
echo "bench-sim-fidelity: calibrating the cpu" >&2
if ! "$bin" calibrate --backend cpu --link-bw "$gbps" "${threads[@]}" --out "$tmp/cpu.json" \
        >"$tmp/calibrate.txt" 2>"$tmp/calibrate.err"; then
    echo "bench-sim-fidelity: delta calibrate failed:" >&2
    tail -5 "$tmp/calibrate.err" >&2
    exit 1
fi

cell() { # cell NAME BACKEND BATCH POLICY BUDGET [ROUND]: one run into $tmp
    local name=$1 be=$2 b=$3 policy=$4 budget=$5 round=${6:-0} extra
    if [ "$be" = sim ]; then extra="--backend sim --gpu-file $tmp/cpu.json"
    else extra="--backend cpu --link-bw $gbps ${threads[*]}"; fi
    local f="$tmp/$name.$be.b$b.$policy.${budget%\%}.r$round"
    echo "  $name $be batch $b $policy $budget" >&2
    # shellcheck disable=SC2086 # the job's options are words
    "$bin" train ${jobs[$name]} --batch "$b" $extra --steps "$steps" \
        --policy "$policy" --budget "$budget" --quiet --json "$f.jsonl" \
        >/dev/null 2>"$f.err"
    echo $? >"$f.rc"
}

for name in $order; do
    b=${batch[$name]}
    for be in cpu sim; do
        rounds=1
        [ "$be" = cpu ] && rounds=$repeat
        for ((r = 0; r < rounds; r++)); do
            cell "$name" "$be" "$b" keep unlimited "$r"
            cell "$name" "$be" $((2 * b)) keep unlimited "$r"
            for bu in $budgets; do
                for p in ${policies[$name]}; do cell "$name" "$be" "$b" "$p" "$bu" "$r"; done
            done
        done
    done
done

python3 - "$tmp" "$order" "${policies[resnet18]}" "${policies[gpt2]}" "$budgets" \
    "$gbps" "$(( $(date +%s) - t0 ))" "${batch[resnet18]}" "${batch[gpt2]}" <<'PY' | tee "$tmp/fidelity.md"
import glob, json, os, statistics, sys
tmp, order, p_r, p_g, budgets, gbps, secs, b_r, b_g = sys.argv[1:10]
order, budgets = order.split(), budgets.split()
policies = {"resnet18": p_r.split(), "gpt2": p_g.split()}
batch = {"resnet18": int(b_r), "gpt2": int(b_g)}
labels = {"resnet18": "ResNet-18, width 16, 3x32x32, SGD",
          "gpt2": "GPT-2 4x128, T 64, AdamW"}

def run(path):
    rc = int(open(path + ".rc").read().strip() or 1)
    steps = []
    if os.path.exists(path + ".jsonl"):
        for line in open(path + ".jsonl"):
            d = json.loads(line)
            if "step" in d and "step_s" in d: steps.append(d["step_s"])
    if rc != 0 or not steps: return {"rc": rc}
    return {"rc": 0, "s": statistics.median(steps[len(steps) // 3:])}

def cell(name, be, b, policy, budget):
    runs = [run(p[:-3]) for p in sorted(glob.glob(
        f"{tmp}/{name}.{be}.b{b}.{policy}.{budget.rstrip('%')}.r*.rc"))]
    ok = [r["s"] for r in runs if r["rc"] == 0]
    if ok: return {"rc": 0, "s": statistics.median(ok)}
    return runs[0] if runs else None

def show(c):
    if c is None: return "-"
    if c["rc"] == 3: return "refused"
    if c["rc"] != 0: return f"exit {c['rc']}"
    return f"{c['s'] * 1e3:.2f}"

d = json.load(open(os.path.join(tmp, "cpu.json")))
print("## The simulator with the cpu's calibration against the cpu\n")
print(f"`make bench-sim-fidelity`: {d['description']}; fp32 GEMM "
      f"{d['fp32_flops'] / 1e9:.1f} GFLOP/s, streaming {d['hbm_bytes_per_s'] / 1e9:.1f} GB/s, "
      f"link {d['link_to_device_bytes_per_s'] / 1e9:.4g} GB/s measured ({gbps} set, for every cpu cell), "
      f"{d['kernel_gap_s'] * 1e6:.1f} us between "
      f"queued kernels. Median step after the first third; ms. {secs} s in all.\n")
print("| model | batch | policy | budget | cpu ms | sim ms | error | overhead cpu | overhead sim | error |")
print("|---|---|---|---|---|---|---|---|---|---|")
keep_err, step_err, ov_err = [], [], []
for name in order:
    b = batch[name]
    ref_m, ref_s = cell(name, "cpu", b, "keep", "unlimited"), cell(name, "sim", b, "keep", "unlimited")
    rows = [(b, "keep", "unlimited"), (2 * b, "keep", "unlimited")]
    rows += [(b, p, bu) for bu in budgets for p in policies[name]]
    for bb, p, bu in rows:
        m, s = cell(name, "cpu", bb, p, bu), cell(name, "sim", bb, p, bu)
        err = ov = ""
        om = os_ = ""
        if m and s and m["rc"] == 0 and s["rc"] == 0:
            e = s["s"] / m["s"] - 1
            err = f"{e * 100:+.0f}%"
            step_err.append(abs(e))
            if p == "keep": keep_err.append(abs(e))
            if p != "keep" and ref_m and ref_s and ref_m["rc"] == 0 and ref_s["rc"] == 0:
                a, c = m["s"] / ref_m["s"], s["s"] / ref_s["s"]
                om, os_ = f"{a:.2f}x", f"{c:.2f}x"
                oe = c / a - 1
                ov = f"{oe * 100:+.0f}%"
                ov_err.append(abs(oe))
        elif p != "keep":
            om, os_ = ("refused" if m and m["rc"] == 3 else ""), ("refused" if s and s["rc"] == 3 else "")
        print(f"| {labels[name]} | {bb} | {p} | {bu} | {show(m)} | {show(s)} | {err} | {om} | {os_} | {ov} |")

def within(errs, lim):
    return f"within {lim * 100:.0f}% in {sum(e <= lim for e in errs)} of {len(errs)} cells"
print()
print(f"keep steps: {within(keep_err, 0.20)}"
      + (f" (mean error {statistics.mean(keep_err) * 100:.0f}%)" if keep_err else ""))
print(f"every step: {within(step_err, 0.20)}"
      + (f" (mean error {statistics.mean(step_err) * 100:.0f}%)" if step_err else ""))
print(f"overheads against keep: {within(ov_err, 0.15)}"
      + (f" (mean error {statistics.mean(ov_err) * 100:.0f}%)" if ov_err else ""))
PY
