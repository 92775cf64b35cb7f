#!/usr/bin/python3
"""The papers' figures on the simulated GPUs, measured: part of
scripts/results.sh (make results), which assembles docs/RESULTS.md.

  results_sim.py DELTA_BIN OUT_DIR

Writes OUT_DIR/sim.md (Markdown sections) and OUT_DIR/sim.json (every
run's figures). For each model row on each device:
  - keep with the whole unconstrained peak as its budget: the reference
    step time and peak;
  - per policy, the smallest budget whose median steady step is at most
    1.1x and 1.3x keep's (bisection on the budget as a fraction of the
    peak, to RES; overhead is assumed to fall as the budget grows, which
    bisection needs: the bracket it ends on is what the table reports);
  - delta's bytes released by swapping and by dropping (to recompute) and
    their costs at 70/50/30%, beside a swap-only (autoswap) and a
    recompute-only (dtr) peer at the same budgets;
  - the largest batch per policy with `delta maxbatch`, when the binary has
    that command.
A step's time is the median over the steps after the first third (delta
profiles and tries its modes first; every policy is measured the same way,
as in scripts/bench_policies.sh). The simulator is deterministic, so so is
every figure here. Environment: STEPS (default 12), JOBS (parallel runs,
default 2), RES (default 0.01), ONLY (a row key, for a quick look),
RUN_TIMEOUT (seconds of real time per run, default 150; a run still going
then counts as failing its threshold), MB_TIMEOUT (per maxbatch search,
default 900), MB_DEVICES (default a100-80g), MB_RESUME (see run_maxbatch), MODE (render or maxbatch: see
again()), AGAIN (a comma-separated list of policies: only theirs are
measured again; every other policy's figures, and the max-batch searches,
are taken from the last OUT_DIR/sim.json, for a change to one policy)."""
import collections
import concurrent.futures as cf
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

BIN = sys.argv[1]
OUT = sys.argv[2]
STEPS = int(os.environ.get("STEPS", "12"))
JOBS = int(os.environ.get("JOBS", "2"))
RES = float(os.environ.get("RES", "0.01"))
ONLY = os.environ.get("ONLY", "")
RUN_TIMEOUT = float(os.environ.get("RUN_TIMEOUT", "150"))
MB_TIMEOUT = float(os.environ.get("MB_TIMEOUT", "900"))
MB_DEVICES = os.environ.get("MB_DEVICES", "a100-80g").split(",")
MODE = os.environ.get("MODE", "")
AGAIN = [p for p in os.environ.get("AGAIN", "").split(",") if p]

PEERS = ["swap", "checkpoint", "dtr", "capuchin", "autoswap"]
POLICIES = ["delta"] + PEERS
THRESHOLDS = [1.1, 1.3]
WHY_BUDGETS = [0.7, 0.5, 0.3]
DEVICES = [("v100-32g", "V100-32GB"), ("a100-80g", "A100-80GB")]
WHY_DEVICE = "a100-80g"

# Model rows: key, label, the model's arguments (besides the device), the
# configuration in words, and the published DELTA max-batch ratio
# (../shared/REFERENCES.md), or None where the papers give none.
SGD = ["--optimizer", "sgd", "--momentum", "0.9"]
ADAMW = ["--optimizer", "adamw"]
MODELS = [
    ("resnet50", "ResNet-50", ["--model", "resnet50", "--batch", "64"] + SGD,
     "224x224x3, 1000 classes, batch 64, SGD momentum 0.9", 2.04),
    ("resnet101", "ResNet-101", ["--model", "resnet101", "--batch", "64"] + SGD,
     "224x224x3, 1000 classes, batch 64, SGD momentum 0.9", 2.25),
    ("bert384", "BERT-Large", ["--model", "bert-large", "--seq-len", "384",
                               "--batch", "8"] + ADAMW,
     "sequence 384, batch 8, dropout 0.1, AdamW", None),
    ("bert512", "BERT-Large", ["--model", "bert-large", "--seq-len", "512",
                               "--batch", "8"] + ADAMW,
     "sequence 512, batch 8, dropout 0.1, AdamW", None),
    ("gpt2l", "GPT-2 Large", ["--model", "gpt2-large", "--seq-len", "1024",
                              "--batch", "2"] + ADAMW,
     "T 1024, batch 2, dropout 0.1, AdamW", 5.5),
    ("gpt2xl", "GPT-2 XL", ["--model", "gpt2-xl", "--seq-len", "1024",
                            "--batch", "1"] + ADAMW,
     "T 1024, batch 1, dropout 0.1, AdamW", 6.0),
]

tmp = tempfile.mkdtemp(prefix="delta-results-")
log_lock = threading.Lock()
t_start = time.time()


def log(msg):
    with log_lock:
        print(f"  [{time.time() - t_start:6.0f} s] {msg}", file=sys.stderr,
              flush=True)


def train(args, policy, budget):
    """One run; budget is bytes (int) or None for the whole peak (keep).
    Returns the parsed figures or {'rc': N, 'err': ...}."""
    fd, path = tempfile.mkstemp(suffix=".jsonl", dir=tmp)
    os.close(fd)
    b = "100%" if budget is None else str(int(budget))
    cmd = [BIN, "train"] + args + ["--steps", str(STEPS), "--policy", policy,
                                   "--budget", b, "--quiet", "--json", path]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True,
                           timeout=RUN_TIMEOUT)
        rc, err = p.returncode, p.stderr.strip()
    except subprocess.TimeoutExpired:
        rc, err = -1, f"over {RUN_TIMEOUT:.0f} s of real time"
    wall = time.time() - t0
    steps, summ = [], None
    if rc == 0:
        for line in open(path):
            d = json.loads(line)
            if "summary" in d:
                summ = d["summary"]
            elif "step" in d:
                steps.append(d)
    os.unlink(path)
    if rc != 0 or not steps or summ is None:
        return {"rc": rc, "err": err.splitlines()[-1] if err else "",
                "wall_s": wall}
    tail = steps[len(steps) // 3:]
    mean = lambda k: statistics.mean(d[k] for d in tail)
    return {"rc": 0, "wall_s": wall,
            "step_s": statistics.median(d["step_s"] for d in tail),
            "peak": summ["peak_device_bytes"],
            "baseline_peak": summ["baseline_peak_bytes"],
            "min_budget": summ["min_budget_bytes"],
            "budget": summ["budget_bytes"],
            "swap_out": mean("swap_out_bytes"),
            "dropped": mean("dropped_bytes"),
            "recomputed_ops": mean("recomputed_ops"),
            "recompute_s": mean("recompute_s"),
            "stall_s": mean("stall_s")}


def search(args, policy, keep, peak, floor):
    """Smallest budget fraction meeting each threshold; returns
    {thr: {'frac', 'overhead', 'below'}} and every run by fraction."""
    runs = {}

    def at(frac):
        if frac not in runs:
            runs[frac] = train(args, policy, round(frac * peak))
        return runs[frac]

    def ok(frac, thr):
        r = runs[frac]
        return r["rc"] == 0 and r["step_s"] <= thr * keep["step_s"] + 1e-12

    found = {}
    for thr in sorted(THRESHOLDS, reverse=True):  # the loosest first
        at(1.0)
        if not ok(1.0, thr):
            found[thr] = None
            continue
        while True:
            passing = [f for f in runs if ok(f, thr)]
            hi = min(passing)
            failing = [f for f in runs if f < hi and not ok(f, thr)]
            lo = max(failing) if failing else floor
            if hi - lo <= RES + 1e-9:
                break
            at(round((lo + hi) / 2, 4))
        r = runs[hi]
        found[thr] = {"frac": hi, "overhead": r["step_s"] / keep["step_s"]}
    return found, runs


def row_job(key, args, gpu, policy, keep):
    peak, floor = keep["baseline_peak"], keep["min_budget"] / keep["baseline_peak"]
    found, runs = search(args + ["--gpu", gpu], policy, keep, peak, floor)
    log(f"{key} {gpu} {policy}: " + ", ".join(
        f"<={t}x: " + (f"{1 - f['frac']:.0%} saved" if f else "none")
        for t, f in sorted(found.items())) +
        f" ({len(runs)} runs, {sum(r['wall_s'] for r in runs.values()):.0f} s)")
    return found, runs


def why_job(args, gpu, policy, keep, frac):
    return train(args + ["--gpu", gpu], policy, round(frac * keep["baseline_peak"]))


def device_info():
    """{preset: (description, memory bytes)} from `delta train --gpu help`."""
    p = subprocess.run([BIN, "train", "--gpu", "help"], capture_output=True, text=True)
    info = {}
    for line in (p.stdout + p.stderr).splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and "GiB" in parts[1]:
            gibs = float(parts[1].split("; ", 1)[1].split(" GiB")[0])
            info[parts[0]] = (parts[1].strip(), int(gibs * 2**30))
    return info


def has_maxbatch():
    p = subprocess.run([BIN, "maxbatch", "--help"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return p.returncode == 0


def maxbatch(args, gpu, policy):
    """`delta maxbatch --policies keep,POLICY` (keep sets the throughput
    floor and the ratio; it is fast, so each policy can run on its own, in
    parallel with the others). Returns the policy's JSON object, or
    {'status': 'timeout' | 'error', ...}."""
    fd, path = tempfile.mkstemp(suffix=".jsonl", dir=tmp)
    os.close(fd)
    # the model's own arguments, less --batch (maxbatch searches it)
    margs = []
    i = 0
    while i < len(args):
        if args[i] == "--batch":
            i += 2
            continue
        margs.append(args[i])
        i += 1
    cmd = [BIN, "maxbatch"] + margs + [
        "--policies", f"keep,{policy}", "--backend", "sim", "--gpu", gpu,
        "--quiet", "--json", path]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True,
                           timeout=MB_TIMEOUT)
        rc, err = p.returncode, p.stderr.strip()
    except subprocess.TimeoutExpired:
        rc, err = -1, f"not finished in {MB_TIMEOUT:.0f} s of real time"
    out = {}
    if os.path.exists(path):
        for line in open(path):
            line = line.strip()
            if line:
                d = json.loads(line)
                if "policy" in d:
                    out[d["policy"]] = d
        os.unlink(path)
    r = out.get(policy) or {"status": "timeout" if rc == -1 else "error",
                            "err": err.splitlines()[-1] if err else f"exit {rc}"}
    r["wall_s"] = time.time() - t0
    r["keep"] = out.get("keep")
    r["cmd"] = " ".join(["delta"] + cmd[1:]).replace(path, "FILE")
    log(f"maxbatch {margs[1]} {gpu} {policy}: " +
        (f"{r.get('max_batch')} (x{r.get('ratio_to_keep')})" if "max_batch" in r else r["err"]) +
        f", {r['wall_s']:.0f} s")
    return r


def run_maxbatch(pool, rows, data, path):
    """Max batch of every policy on the rows on MB_DEVICES, the smallest
    models first (the largest may not finish), into data["rows"][row]
    ["maxbatch"]["by_policy"]; data goes to path after each search, so an
    interrupted run keeps what it measured. With MB_RESUME=1 a search
    already in data is not run again."""
    t0 = time.time()
    data["mb_timeout"] = MB_TIMEOUT
    if not (os.environ.get("MB_RESUME") and "maxbatch_at" in data):
        data["maxbatch_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t0))
        data["maxbatch_s"] = 0
        for e in data["rows"].values():
            e.pop("maxbatch", None)
    spent = data["maxbatch_s"]
    # MB_FIRST=row,row...: those rows first, delta before the peers in them
    first = [r for r in os.environ.get("MB_FIRST", "").split(",") if r]
    order = sorted(((m, d, p) for m, d in rows for p in POLICIES),
                   key=lambda x: (x[0][0] not in first,
                                  first.index(x[0][0]) if x[0][0] in first else 0,
                                  x[2] != "delta" if x[0][0] in first else 0))
    futs = {}
    for m, d, p in order:
        k = f"{m[0]}@{d[0]}"
        if d[0] not in MB_DEVICES or k not in data["rows"]:
            continue
        if p not in data["rows"][k].get("maxbatch", {}).get("by_policy", {}):
            futs[pool.submit(maxbatch, m[2], d[0], p)] = (k, p)
    for f in cf.as_completed(futs):
        k, p = futs[f]
        r = f.result()
        bp = data["rows"][k].setdefault("maxbatch", {"by_policy": {}})["by_policy"]
        bp[p] = r
        if r.get("keep"):
            bp["keep"] = r["keep"]
        data["maxbatch_s"] = spent + time.time() - t0
        json.dump(data, open(path + ".tmp", "w"), indent=1)
        os.replace(path + ".tmp", path)


def gib(b):
    return f"{b / 2**30:.1f}"


def again():
    """MODE=render: the Markdown again from OUT_DIR/sim.json; MODE=maxbatch:
    only the max-batch runs, merged into it (the rest is deterministic and
    slow to measure again)."""
    rows = [(m, d) for m in MODELS for d in DEVICES if not ONLY or m[0] == ONLY]
    path = os.path.join(OUT, "sim.json")
    data = json.load(open(path))
    if MODE == "maxbatch" and has_maxbatch():
        with cf.ThreadPoolExecutor(max_workers=JOBS) as pool:
            run_maxbatch(pool, rows, data, path)
    write_md(rows, data, any("maxbatch" in e for e in data["rows"].values()))


def main():
    os.makedirs(OUT, exist_ok=True)
    if MODE in ("render", "maxbatch"):
        return again()
    rows = [(m, d) for m in MODELS for d in DEVICES if not ONLY or m[0] == ONLY]
    data = {"steps": STEPS, "res": RES, "rows": {}}
    pool = cf.ThreadPoolExecutor(max_workers=JOBS)
    old = json.load(open(os.path.join(OUT, "sim.json"))) if AGAIN else None
    again_p = lambda p: not AGAIN or p in AGAIN

    # keep, the reference of every row
    keeps = {}
    futs = {(m[0], d[0]): pool.submit(train, m[2] + ["--gpu", d[0]], "keep", None)
            for m, d in rows}
    for (k, g), f in futs.items():
        keeps[(k, g)] = f.result()
        r = keeps[(k, g)]
        log(f"{k} {g} keep: " + (f"{r['step_s']:.4f} s/step, peak {gib(r['peak'])} GiB"
                                  if r["rc"] == 0 else f"failed: {r['err']}"))

    # the searches, the why-table runs and maxbatch, all in the pool
    # the largest models first (their delta searches are the long poles)
    sfuts, wfuts, mfuts = {}, {}, {}
    for m, d in reversed(rows):
        keep = keeps[(m[0], d[0])]
        if keep["rc"] != 0:
            continue
        for p in filter(again_p, POLICIES):
            sfuts[(m[0], d[0], p)] = pool.submit(row_job, m[0], m[2], d[0], p, keep)
    for m, d in rows:
        keep = keeps[(m[0], d[0])]
        if keep["rc"] != 0:
            continue
        if d[0] == WHY_DEVICE:
            for frac in WHY_BUDGETS:
                for p in filter(again_p, ("delta", "autoswap", "dtr")):
                    wfuts[(m[0], frac, p)] = pool.submit(why_job, m[2], d[0], p, keep, frac)
    mb = has_maxbatch()
    if not mb:
        log("this delta has no maxbatch command: the max-batch table is left out")

    for m, d in rows:
        key = f"{m[0]}@{d[0]}"
        keep = keeps[(m[0], d[0])]
        entry = {"keep": keep, "search": {}, "runs": {}}
        for p in POLICIES:
            if (m[0], d[0], p) in sfuts:
                found, runs = sfuts[(m[0], d[0], p)].result()
                entry["search"][p] = {str(t): v for t, v in found.items()}
                entry["runs"][p] = {f"{f:.4f}": r for f, r in sorted(runs.items())}
            elif old and key in old["rows"] and p in old["rows"][key]["search"]:
                entry["search"][p] = old["rows"][key]["search"][p]
                entry["runs"][p] = old["rows"][key]["runs"][p]
        if old and "maxbatch" in old["rows"].get(key, {}):
            entry["maxbatch"] = old["rows"][key]["maxbatch"]
        data["rows"][key] = entry
    why = {f"{k}@{frac}@{p}": f.result() for (k, frac, p), f in wfuts.items()}
    if old:
        why = {**{k: v for k, v in old.get("why", {}).items()
                  if k.rsplit("@", 1)[1] not in AGAIN}, **why}
    data["why"] = why
    data["sim_s"] = time.time() - t_start
    if old:
        data["again"] = AGAIN
        data["others_at"] = old.get("others_at", old.get("sim_at"))
        for k in ("maxbatch_at", "maxbatch_s"):
            if k in old:
                data[k] = old[k]
    data["sim_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t_start))
    path = os.path.join(OUT, "sim.json")
    json.dump(data, open(path, "w"), indent=1)
    if mb and not old:
        run_maxbatch(pool, rows, data, path)
    pool.shutdown()
    write_md(rows, data, mb)
    log(f"done in {time.time() - t_start:.0f} s")


def saved(e, p, thr):
    """Memory saved by policy p at threshold thr in row entry e, or None."""
    f = e["search"].get(p, {}).get(str(thr))
    return None if not f else 1 - f["frac"]


def batch_ratio(e, p):
    x = e.get("maxbatch", {}).get("by_policy", {}).get(p)
    r = x and x.get("ratio_to_keep")
    return r if isinstance(r, (int, float)) else None


def headline(rows, data, mb, w):
    """The summary table: delta, the best peer and the published figures."""
    pct = lambda v: "—" if v is None else f"{v:.0%}"
    w("## Headline\n")
    w("Memory saved at ≤ 1.1× and ≤ 1.3× keep's step time, and the largest batch against keep's, "
      "for delta and for the best of the five peers in the same cell (which peer in brackets); "
      "published DELTA figures from ../shared/REFERENCES.md: 40–72% memory saved (per model figures "
      "not given), max batch ×2.04 ResNet-50, ×2.25 ResNet-101, ×5.5 GPT2-Large, ×6 GPT2-XL. The max-batch "
      "searches are slow in real time and ran on the " +
      ", ".join(dict(DEVICES).get(g, g) for g in MB_DEVICES) + " only.\n")
    w("| row | device | delta saved ≤1.1× | best peer | delta saved ≤1.3× | best peer | "
      "delta max batch | best peer | published max batch |")
    w("|---|---|---|---|---|---|---|---|---|")
    tally = {"ge_peers_11": 0, "ge_peers_13": 0, "ge_40_13": 0, "n": 0,
             "mb_pub": 0, "mb_n": 0, "mb_peers": 0, "mb_rows": 0}
    for m, d in rows:
        e = data["rows"][f"{m[0]}@{d[0]}"]
        if e["keep"]["rc"] != 0:
            continue
        tally["n"] += 1
        cells = []
        for thr in THRESHOLDS:
            dv = saved(e, "delta", thr)
            peers = [(saved(e, p, thr), p) for p in PEERS if saved(e, p, thr) is not None]
            bp = max(peers) if peers else (None, "")
            cells += [pct(dv), f"{pct(bp[0])} ({bp[1]})" if bp[0] is not None else "—"]
            if (dv or 0) >= (bp[0] or 0):
                tally["ge_peers_11" if thr == 1.1 else "ge_peers_13"] += 1
            if thr == 1.3 and (dv or 0) >= 0.40:
                tally["ge_40_13"] += 1
        if mb and d[0] in MB_DEVICES:
            dv = batch_ratio(e, "delta")
            peers = [(batch_ratio(e, p), p) for p in PEERS if batch_ratio(e, p) is not None]
            bp = max(peers) if peers else (None, "")
            dx = e.get("maxbatch", {}).get("by_policy", {}).get("delta")
            cells += [("not run" if not dx else "not finished" if dv is None else f"×{dv:.2f}"),
                      "—" if bp[0] is None else f"×{bp[0]:.2f} ({bp[1]})"]
            if dv is not None:
                tally["mb_rows"] += 1
                tally["mb_peers"] += dv >= (bp[0] or 0)
                if m[4]:
                    tally["mb_n"] += 1
                    tally["mb_pub"] += dv >= m[4]
        else:
            cells += ["—", "—"]
        cells.append(f"×{m[4]}" if m[4] else "—")
        w(f"| {m[1]} {m[3].split(',')[0]} | {d[1]} | " + " | ".join(cells) + " |")
    w("")
    n = tally["n"]
    w(f"Counted over the {n} rows: delta saves at least as much as every peer in "
      f"{tally['ge_peers_11']} at ≤ 1.1× and {tally['ge_peers_13']} at ≤ 1.3×; it saves at least "
      f"the published lower bound of 40% at ≤ 1.3× in {tally['ge_40_13']}." +
      (f" Its max batch is at or above the best measured peer's in {tally['mb_peers']} of the "
       f"{tally['mb_rows']} rows where delta's search finished, and at or above the published ratio in {tally['mb_pub']} of the "
       f"{tally['mb_n']} rows that have one." if mb else "") + "\n")


def write_md(rows, data, mb):
    o = []
    w = o.append
    headline(rows, data, mb, w)
    w("## Configurations\n")
    w("Every simulated row: fp32 on the CUDA cores (the simulator's GEMM peak is the fp32 one; "
      "no tensor cores, no mixed precision), the presets of docs/DEVICE.md, steps of one fixed "
      f"shape, {STEPS} steps per run, a run's step time the median over the steps after the first "
      "third. The unconstrained peak is keep's (the dry plan's lifetime-planned arena: parameters, "
      "gradients, optimizer state, inputs, activations and workspace all count).\n")
    devs = device_info()
    for g, name in DEVICES:
        if g in devs:
            w(f"- {name} (`--gpu {g}`): {devs[g][0]}")
    w("")
    w("| row | model | configuration | device | keep s/step | unconstrained peak |")
    w("|---|---|---|---|---|---|")
    for m, d in rows:
        k = data["rows"][f"{m[0]}@{d[0]}"]["keep"]
        over = k["rc"] == 0 and d[0] in devs and k["peak"] > devs[d[0]][1]
        cell = (f"{k['step_s']:.4f} | {gib(k['peak'])} GiB" +
                (" (over the device: keep needs more than it has; the simulator "
                 "runs it anyway, as on a slightly larger device)" if over else "")
                if k["rc"] == 0 else f"failed | {k['err']}")
        w(f"| {m[0]} | {m[1]} | {m[3]} | {d[1]} | {cell} |")
    w("")
    w("## Memory saved at a bounded overhead\n")
    w("Memory saved = 1 − budget / unconstrained peak, for the smallest budget whose median steady "
      "step is at most 1.1× (and 1.3×) keep's; found by bisection on the budget to "
      f"{RES:.0%} of the peak (the budget {RES:.0%} below the one given exceeds the threshold or "
      "is refused). \"—\": not even the whole peak meets it. Published (DELTA, Tang et al. 2022 / "
      "TACO 2024, ../shared/REFERENCES.md): 40–72% memory saved with convergence comparable to "
      "the baseline (the overhead at which it is reached is not given there).\n")
    for thr in THRESHOLDS:
        w(f"### at ≤ {thr}× keep's step time\n")
        w("| row | device | " + " | ".join(POLICIES) + " |")
        w("|---|---|" + "---|" * len(POLICIES))
        for m, d in rows:
            e = data["rows"][f"{m[0]}@{d[0]}"]
            cells = []
            for p in POLICIES:
                f = e["search"].get(p, {}).get(str(thr))
                cells.append("—" if not f else f"{1 - f['frac']:.0%} ({f['overhead']:.2f}×)")
            best = max((1 - (e["search"].get(p, {}).get(str(thr)) or {"frac": 1})["frac"], p)
                       for p in POLICIES)
            cells = [f"**{c}**" if p == best[1] and best[0] > 0 else c
                     for c, p in zip(cells, POLICIES)]
            w(f"| {m[0]} | {d[1]} | " + " | ".join(cells) + " |")
        w("")
    stopped = sum(1 for e in data["rows"].values() for runs in e["runs"].values()
                  for r in runs.values() if r["rc"] == -1)
    total = sum(len(runs) for e in data["rows"].values() for runs in e["runs"].values())
    w("Each cell: memory saved (the overhead measured at that budget); bold: the most saved. "
      f"{total} runs in all; {stopped} were stopped for taking too long in real time (the "
      "simulator is deterministic but not free: delta's online steps at small budgets recompute "
      "and compact heavily) and counted as over the threshold.\n")

    w("## Why each choice: what delta released, and what it cost\n")
    dev = dict(DEVICES)[WHY_DEVICE]
    w(f"On the simulated {dev}, per step (means over the steady steps): the bytes delta swapped "
      "out and the bytes it dropped to recompute, the seconds compute stalled waiting for "
      "transfers and the seconds spent recomputing, and its overhead beside the swap-only "
      "(autoswap) and recompute-only (dtr) peers at the same budget. The papers' argument — "
      "swapping is not always the best first choice — reads off the mix: where the link can hide "
      "the transfers delta swaps, where it cannot it recomputes.\n")
    w("| row | budget | swapped out GiB | dropped GiB | stall s | recompute s | delta | autoswap (swap only) | dtr (recompute only) |")
    w("|---|---|---|---|---|---|---|---|---|")
    tally = collections.Counter()
    for m, d in rows:
        if d[0] != WHY_DEVICE:
            continue
        keep = data["rows"][f"{m[0]}@{d[0]}"]["keep"]
        if keep["rc"] != 0:
            continue
        for frac in WHY_BUDGETS:
            r = {p: data["why"].get(f"{m[0]}@{frac}@{p}") for p in ("delta", "autoswap", "dtr")}
            ov = {p: (f"{r[p]['step_s'] / keep['step_s']:.2f}×" if r[p] and r[p]["rc"] == 0
                      else "refused" if r[p] and r[p]["rc"] == 3 else
                      "not measured (over the time limit)" if r[p] and r[p]["rc"] == -1 else
                      f"failed ({r[p]['err'][:40]})" if r[p] else "")
                  for p in r}
            dr = r["delta"]
            if dr and dr["rc"] == 0:
                mix = (f"{gib(dr['swap_out'])} | {gib(dr['dropped'])} | {dr['stall_s']:.3f} | "
                       f"{dr['recompute_s']:.3f}")
            else:
                mix = "| | |"
            w(f"| {m[0]} | {frac:.0%} | {mix} | {ov['delta']} | {ov['autoswap']} | {ov['dtr']} |")
            if dr and dr["rc"] == 0:
                tally["n"] += 1
                tally["both"] += dr["swap_out"] > 0 and dr["dropped"] > 0
                tally["le_both"] += all(not (r[p] and r[p]["rc"] == 0) or
                                        dr["step_s"] <= r[p]["step_s"] + 1e-12
                                        for p in ("autoswap", "dtr"))
                tally["only"] += sum(1 for p in ("autoswap", "dtr") if r[p] and r[p]["rc"] != 0)
    w("")
    w(f"Of the {tally['n']} cells delta ran, it both swapped and dropped in {tally['both']}, and was "
      f"at least as fast as the swap-only and the recompute-only peer in {tally['le_both']}; "
      f"in {tally['only']} cells one of those peers could not run the budget at all (refused: "
      "dtr cannot move parameters, gradients or optimizer state, which exceed the budget there).\n")

    w("## Maximum batch against keep\n")
    if not mb:
        w("Not measured: this build of delta has no `maxbatch` command.\n")
    else:
        devs = ", ".join(dict(DEVICES).get(g, g) for g in MB_DEVICES)
        w(f"`delta maxbatch` on the simulated {devs}, each policy searched beside keep "
          "(`--policies keep,P`, default `--min-throughput 0.75`: a batch counts only if its "
          "samples/s reach 0.75× keep's at keep's largest batch; 12 steps per probe). Each cell: "
          "largest batch (× keep's largest) and its samples/s (tokens are not counted: a GPT-2 or "
          "BERT sample is one sequence). Published DELTA ratios (../shared/REFERENCES.md): "
          "ResNet-50 ×2.04, ResNet-101 ×2.25, GPT2-Large ×5.5, GPT2-XL ×6; BERT-Large: evaluated, "
          f"no ratio given. \"none (throughput)\": no batch reaches the floor. A search still going "
          f"after {data.get('mb_timeout', MB_TIMEOUT):.0f} s of real time is stopped "
          "and says so (\"not finished\"); \"not run\": the run ended before this search started "
          "(`MB_RESUME=1 MODE=maxbatch scripts/results_sim.py build/delta build/results` goes on "
          "from there).\n")
        w("| row | device | published | keep | " + " | ".join(POLICIES) + " |")
        w("|---|---|---|---|" + "---|" * len(POLICIES))
        cmds = []
        for m, d in rows:
            if d[0] not in MB_DEVICES:
                continue
            bp = data["rows"][f"{m[0]}@{d[0]}"].get("maxbatch", {}).get("by_policy", {})

            def cell(p):
                x = bp.get(p)
                if not x:
                    return "not run"
                if "max_batch" not in x:
                    return ("not finished" if x.get("status") == "timeout"
                            else f"error: {x.get('err', '')[:60]}")
                if x["max_batch"] == 0:
                    return f"none ({x.get('limited_by', x.get('status'))})"
                r = x.get("ratio_to_keep")
                sps = x.get("samples_per_s")
                return (f"{x['max_batch']}" +
                        (f" (×{r:.2f})" if isinstance(r, (int, float)) and p != "keep" else "") +
                        (f", {sps:.1f}/s" if isinstance(sps, (int, float)) and x["max_batch"] else ""))
            pub = f"×{m[4]}" if m[4] else "—"
            w(f"| {m[1]} {m[3].split(',')[0]} | {d[1]} | {pub} | {cell('keep')} | " +
              " | ".join(cell(p) for p in POLICIES) + " |")
            cmds += [x["cmd"] for x in bp.values() if "cmd" in x]
        w("")
        if cmds:
            w(f"For example: `{cmds[0]}`.\n")
    if "sim_at" in data:
        w(f"The simulated figures above were measured from {data['sim_at']} in "
          f"{data['sim_s'] / 60:.0f} minutes" +
          (f"; the max-batch searches from {data['maxbatch_at']} in {data['maxbatch_s'] / 60:.0f} minutes"
           if "maxbatch_at" in data else "") + ".\n")
    if data.get("again"):
        w(f"Measured again then (`AGAIN={','.join(data['again'])}`): "
          f"{', '.join(data['again'])}; every other policy's figures and the max-batch searches "
          f"are from the run of {data['others_at']}.\n")
    open(os.path.join(OUT, "sim.md"), "w").write("\n".join(o) + "\n")


if __name__ == "__main__":
    main()
