#!/usr/bin/env bash
# Loss curves of real training on the cpu, unconstrained beside a 40%
# budget: part of scripts/results.sh (make results).
#   results_loss.sh DELTA_BIN OUT_DIR IMG_DIR
# Two models, each trained twice from the same seed: with an unlimited
# budget (keep) and with --budget 40% (delta, the default with a budget,
# on the cpu backend's emulated link). Writes OUT_DIR/loss.md, the per-step
# losses, and IMG_DIR/loss_resnet18.png and loss_gpt2.png (gnuplot). The
# runtime's guarantee is that the budget changes nothing in the arithmetic,
# so the per-step losses of the two runs must be bit-identical; the
# Markdown says whether they are (the JSON's numbers are printed to round
# trip, so equal text means equal doubles).
# Environment: RESNET_STEPS (default 300), GPT_STEPS (default 600), THREADS
# (default 1: the cores are shared, and one thread per run keeps OpenMP from
# spinning against other processes).
set -u
bin=$1
out=$2
img=$3
resnet_steps=${RESNET_STEPS:-300}
gpt_steps=${GPT_STEPS:-600}
threads=${THREADS:-1}
text=/usr/share/common-licenses/GPL-3   # in base-files: on every Debian
mkdir -p "$out" "$img"

resnet="--model resnet18 --width 16 --batch 128 --lr 0.05 --data fashion-mnist --steps $resnet_steps --eval-batches 20"
gpt="--model gpt2-tiny --data $text --batch 8 --lr 1e-3 --steps $gpt_steps"

run() { # run NAME BUDGET ARGS...
    local name=$1 budget=$2
    shift 2
    echo "  loss: $name ($budget)" >&2
    local b=()
    [ "$budget" != unlimited ] && b=(--budget "$budget")
    "$bin" train "$@" "${b[@]}" --threads "$threads" --quiet \
        --json "$out/$name.jsonl" >"$out/$name.txt" 2>"$out/$name.err" ||
        echo "  loss: $name failed: $(tail -1 "$out/$name.err")" >&2
}

if [ -z "${PLOT_ONLY:-}" ]; then   # PLOT_ONLY=1: tables and plots again from the logs
    run resnet18_full unlimited $resnet
    run resnet18_40 40% $resnet
    run gpt2_full unlimited $gpt
    run gpt2_40 40% $gpt
fi

/usr/bin/python3 - "$out" "$img" "$resnet" "$gpt" "$text" <<'EOF'
import json, os, subprocess, sys
out, img, resnet, gpt, text = sys.argv[1:6]

def load(name):
    steps, summ = [], None
    path = os.path.join(out, name + ".jsonl")
    if not os.path.exists(path): return None, None, []
    raw = []
    for line in open(path):
        d = json.loads(line)
        if "summary" in d: summ = d["summary"]
        elif "step" in d:
            steps.append(d)
            # the loss as written, to compare bit for bit
            raw.append(line.split('"loss":', 1)[1].split(",", 1)[0])
    return steps, summ, raw

md = ["## Loss curves: real training on the cpu under 40% of the memory\n"]
md.append("Each model trained twice from seed 0 on this machine's cpu backend: unconstrained "
          "(keep) and with `--budget 40%` (delta, the default policy with a budget, over the "
          "backend's emulated link of one byte per 1,000 GEMM flops). Both on one thread.\n")
md.append("| model | data | steps | run | peak device memory | median step s | swapped out / dropped per step | final loss | test accuracy |")
md.append("|---|---|---|---|---|---|---|---|---|")
verdicts, pics = [], []
for key, title, short, data in (("resnet18", "ResNet-18 (width 16), batch 128, SGD lr 0.05",
                                 "ResNet-18 on Fashion-MNIST",
                                 "Fashion-MNIST (Debian's dataset-fashion-mnist)"),
                                ("gpt2", "GPT-2 tiny (2 layers, 64 wide, T 64, bytes), batch 8, AdamW lr 1e-3",
                                 "GPT-2 tiny on the GPL-3 text",
                                 f"the text of {text} ({os.path.getsize(text):,} bytes, from base-files)")):
    full, fs, fraw = load(key + "_full")
    lim, ls, lraw = load(key + "_40")
    for run, steps, s in (("unconstrained", full, fs), ("40% budget, delta", lim, ls)):
        if not s:
            md.append(f"| {title} | {data} | | {run} | failed | | | | |"); continue
        tail = steps[len(steps) // 3:]
        so = sum(d["swap_out_bytes"] for d in tail) / len(tail) / 2**20
        dr = sum(d.get("dropped_bytes", 0) for d in tail) / len(tail) / 2**20
        acc = f"{s['test_accuracy']:.4f}" if "test_accuracy" in s else "—"
        md.append(f"| {title} | {data} | {s['steps']} | {run} | {s['peak_device_bytes'] / 2**20:.1f} MiB | "
                  f"{s['median_step_s']:.4f} | {so:.1f} / {dr:.1f} MiB | {s['final_loss']:.4f} | {acc} |")
    if fs and ls:
        same = fraw == lraw
        diff = [i + 1 for i, (a, b) in enumerate(zip(fraw, lraw)) if a != b]
        verdicts.append(f"- {key}: {len(fraw)} per-step losses, "
                        + ("**bit-identical** between the two runs (every `loss` in the two JSON logs is the same text)."
                           if same else f"**differ** at {len(diff)} steps (first: step {diff[0] if diff else '-'}; lengths {len(fraw)} and {len(lraw)})."))
        data_path = os.path.join(out, key + "_loss.dat")
        with open(data_path, "w") as f:
            for a, b in zip(full, lim):
                f.write(f"{a['step']} {a['loss']} {b['loss']}\n")
        png = os.path.join(img, f"loss_{key}.png")
        plot = f"""set terminal pngcairo size 800,450 noenhanced
set output '{png}'
set title '{short}: training loss per step'
set xlabel 'step'
set ylabel 'loss'
set key top right
set grid
plot '{data_path}' using 1:2 with lines lw 5 lc rgb '#90b8e0' title 'unconstrained (keep, {fs['peak_device_bytes'] / 2**20:.1f} MiB)', \\
     '{data_path}' using 1:3 with lines lw 1 lc rgb '#c03000' title '40% budget (delta, {ls['peak_device_bytes'] / 2**20:.1f} MiB)'
"""
        r = subprocess.run(["gnuplot"], input=plot, text=True, capture_output=True)
        if r.returncode != 0:
            verdicts.append(f"- {key}: gnuplot failed: {r.stderr.strip()[:200]}")
        else:
            pics.append(f"![{key}: loss per step](img/loss_{key}.png)")
md.append("")
md += verdicts
md.append("")
md += [p + "\n" for p in pics]
md.append("")
md.append("Commands: `delta train " + resnet + " [--budget 40%] --threads 1 --json …` and `delta train " + gpt + " [--budget 40%] --threads 1 --json …`.\n")
open(os.path.join(out, "loss.md"), "w").write("\n".join(md) + "\n")
EOF
