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
    that command;
  - mixed precision: the MP_MODELS rows on MP_DEVICES in fp32 and in bf16
    (`--precision bf16`), with the same searches, the swap/recompute mix at
    70/50/30% of each precision's own peak, and the largest batch.
A step's time is the median over the steps after the first third (delta
profiles and tries its modes first; every policy is measured the same way,
as in scripts/bench_policies.sh). The simulator is deterministic, so so is
every figure here. Environment: STEPS (default 12), JOBS (parallel runs,
default 2), RES (default 0.01), ONLY (a row key, for a quick look),
RUN_TIMEOUT (seconds of real time per run, default 150; a run still going
then counts as failing its threshold), MB_TIMEOUT (per maxbatch search,
default 900), MB_DEVICES (default a100-80g,h200-measured: the fp32 rows searched),
MP_MODELS (row keys, default resnet50,bert384,gpt2l) and MP_DEVICES (default
h100-80g,h200-141g): the mixed-precision rows, MB_MP (default 1: search their
largest batch too; 0 leaves it out), MB_RESUME (see run_maxbatch), MODE (render, maxbatch or why: see
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
MB_DEVICES = os.environ.get("MB_DEVICES", "a100-80g,h200-measured").split(",")
MP_MODELS = os.environ.get("MP_MODELS", "resnet50,bert384,gpt2l").split(",")
MP_DEVICES = os.environ.get("MP_DEVICES", "h100-80g,h200-141g").split(",")
MB_MP = os.environ.get("MB_MP", "1") != "0"
MODE = os.environ.get("MODE", "")
AGAIN = [p for p in os.environ.get("AGAIN", "").split(",") if p]

PEERS = ["swap", "checkpoint", "dtr", "capuchin", "autoswap"]
POLICIES = ["delta"] + PEERS
THRESHOLDS = [1.1, 1.3]
WHY_BUDGETS = [0.7, 0.5, 0.3]
# the devices of the fp32 tables, and every device's name in the tables.
# The H200 of the fp32 tables is the one a lent GPU measured (delta
# calibrate --backend cuda; a device file, --gpu-file); the others, and
# the mixed-precision section's (whose BF16 convolutions that measurement
# predates), are datasheet presets.
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DEVICE_FILES = {"h200-measured": os.path.join(ROOT, "devices", "h200-141g-measured.json")}
DEVICES = [("v100-32g", "V100-32GB"), ("a100-80g", "A100-80GB"),
           ("h200-measured", "H200-141GB (measured)")]
NAMES = dict([("v100-16g", "V100-16GB"), ("v100-32g", "V100-32GB"),
              ("a100-40g", "A100-40GB"), ("a100-80g", "A100-80GB"),
              ("h100-80g", "H100-80GB"), ("h200-141g", "H200-141GB"),
              ("h200-measured", "H200-141GB (measured)")])


def gpu_args(g):
    """The simulated device's arguments: a preset's name or a device file."""
    return ["--gpu-file", DEVICE_FILES[g]] if g in DEVICE_FILES else ["--gpu", g]
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



class Row(collections.namedtuple("Row", "m gpu prec main mp")):
    """One model on one device in one precision. main: a row of the fp32
    tables (DEVICES); mp: a row of the mixed-precision section, where each
    MP_MODELS model runs on MP_DEVICES in fp32 and in bf16 (a row on a
    device of both lists is both)."""

    @property
    def key(self):  # sim.json's key; fp32 keeps the older form
        return f"{self.m[0]}@{self.gpu}" + ("" if self.prec == "fp32" else f"@{self.prec}")

    @property
    def args(self):  # the model's arguments, less --gpu
        return self.m[2] + ([] if self.prec == "fp32" else ["--precision", self.prec])

    @property
    def dev(self):
        return NAMES.get(self.gpu, self.gpu)

    @property
    def why(self):  # gets the swap/recompute mix at WHY_BUDGETS
        return (self.main and self.gpu == WHY_DEVICE) or self.mp

    @property
    def mb(self):  # gets a max-batch search
        return (self.main and self.gpu in MB_DEVICES) or (self.mp and MB_MP)


def build_rows():
    """The fp32 rows (every model on DEVICES), then the mixed-precision
    rows not among them, in table order."""
    rows = collections.OrderedDict()
    for m in MODELS:
        if ONLY and m[0] != ONLY:
            continue
        for g, _ in DEVICES:
            rows[(m[0], g, "fp32")] = Row(m, g, "fp32", True, False)
    for m in MODELS:
        if (ONLY and m[0] != ONLY) or m[0] not in MP_MODELS:
            continue
        for g in MP_DEVICES:
            for prec in ("fp32", "bf16"):
                r = rows.get((m[0], g, prec))
                rows[(m[0], g, prec)] = (r._replace(mp=True) if r
                                         else Row(m, g, prec, False, True))
    return list(rows.values())


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
            "stall_s": mean("stall_s"),
            "defrag_bytes": mean("defrag_bytes"),
            "defrag_moves": mean("defrag_moves")}


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


def row_job(row, policy, keep):
    peak, floor = keep["baseline_peak"], keep["min_budget"] / keep["baseline_peak"]
    found, runs = search(row.args + gpu_args(row.gpu), policy, keep, peak, floor)
    log(f"{row.key} {policy}: " + ", ".join(
        f"<={t}x: " + (f"{1 - f['frac']:.0%} saved" if f else "none")
        for t, f in sorted(found.items())) +
        f" ({len(runs)} runs, {sum(r['wall_s'] for r in runs.values()):.0f} s)")
    return found, runs


def why_job(row, policy, keep, frac):
    return train(row.args + gpu_args(row.gpu), policy, round(frac * keep["baseline_peak"]))


def device_info():
    """{device: (description, memory bytes)}: the presets' from `delta train
    --gpu help`, the device files' from their figures, in the same words."""
    p = subprocess.run([BIN, "train", "--gpu", "help"], capture_output=True, text=True)
    info = {}
    for line in (p.stdout + p.stderr).splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and "GiB" in parts[1]:
            gibs = float(parts[1].split("; ", 1)[1].split(" GiB")[0])
            info[parts[0]] = (parts[1].strip(), int(gibs * 2**30))
    for g, path in DEVICE_FILES.items():
        d = json.load(open(path))
        link = min(d["link_to_host_bytes_per_s"], d["link_to_device_bytes_per_s"])
        # the best streaming rate can be a cache-resident size's: the
        # elementwise curve's largest point says what HBM gives
        big = (d.get("efficiency", {}).get("elementwise") or [[0, 1]])[-1]
        info[g] = (f"{d['description']}; "
                   f"{d['memory_bytes'] / 2**30:.1f} GiB, {d['fp32_flops'] / 1e12:.1f} TFLOP/s fp32, "
                   f"{d['bf16_flops'] / 1e12:.0f} TFLOP/s bf16, "
                   f"{d['hbm_bytes_per_s'] * big[1] / 1e9:.0f} GB/s HBM (streaming "
                   f"{big[0] / 2**20:.0f} MiB), link {link / 1e9:.0f} GB/s; measured efficiency "
                   f"curves per kind of op and factors per op type",
                   int(d["memory_bytes"]))
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
        "--policies", f"keep,{policy}", "--backend", "sim"] + gpu_args(gpu) + [
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
    log(f"maxbatch {margs[1]}{' bf16' if '--precision' in margs else ''} {gpu} {policy}: " +
        (f"{r.get('max_batch')} (x{r.get('ratio_to_keep')})" if "max_batch" in r else r["err"]) +
        f", {r['wall_s']:.0f} s")
    return r


def run_maxbatch(pool, rows, data, path):
    """Max batch of every policy on the rows that get one (Row.mb), the
    smallest models first (the largest may not finish), into data["rows"][row]
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
    order = sorted(((r, p) for r in rows for p in POLICIES),
                   key=lambda x: (x[0].m[0] not in first,
                                  first.index(x[0].m[0]) if x[0].m[0] in first else 0,
                                  x[1] != "delta" if x[0].m[0] in first else 0))
    futs = {}
    for r, p in order:
        k = r.key
        if not r.mb or k not in data["rows"]:
            continue
        if p not in data["rows"][k].get("maxbatch", {}).get("by_policy", {}):
            futs[pool.submit(maxbatch, r.args, r.gpu, p)] = (k, p)
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
    slow to measure again); MODE=why: only the mixed-precision section's
    runs of its why table, at their keep's budgets (a few minutes)."""
    rows = build_rows()
    path = os.path.join(OUT, "sim.json")
    data = json.load(open(path))
    if MODE == "why":
        with cf.ThreadPoolExecutor(max_workers=JOBS) as pool:
            futs = {f"{r.key}@{frac}@{p}": pool.submit(why_job, r, p, data["rows"][r.key]["keep"], frac)
                    for r in rows if r.mp and data["rows"][r.key]["keep"]["rc"] == 0
                    for frac in WHY_BUDGETS for p in ("delta", "autoswap", "dtr")}
            data["why"].update({k: f.result() for k, f in futs.items()})
        data["why_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t_start))
        data["why_s"] = time.time() - t_start
        json.dump(data, open(path + ".tmp", "w"), indent=1)
        os.replace(path + ".tmp", path)
    if MODE == "maxbatch" and has_maxbatch():
        with cf.ThreadPoolExecutor(max_workers=JOBS) as pool:
            run_maxbatch(pool, rows, data, path)
    write_md(rows, data, any("maxbatch" in e for e in data["rows"].values()))


def main():
    os.makedirs(OUT, exist_ok=True)
    if MODE in ("render", "maxbatch", "why"):
        return again()
    rows = build_rows()
    data = {"steps": STEPS, "res": RES, "rows": {}}
    pool = cf.ThreadPoolExecutor(max_workers=JOBS)
    old = json.load(open(os.path.join(OUT, "sim.json"))) if AGAIN else None
    again_p = lambda p: not AGAIN or p in AGAIN

    # keep, the reference of every row
    keeps = {}
    futs = {row.key: pool.submit(train, row.args + gpu_args(row.gpu), "keep", None)
            for row in rows}
    for k, f in futs.items():
        keeps[k] = f.result()
        r = keeps[k]
        log(f"{k} keep: " + (f"{r['step_s']:.4f} s/step, peak {gib(r['peak'])} GiB"
                             if r["rc"] == 0 else f"failed: {r['err']}"))

    # the searches, the why-table runs and maxbatch, all in the pool
    # the largest models first (their delta searches are the long poles)
    sfuts, wfuts, mfuts = {}, {}, {}
    for row in sorted(rows, key=lambda r: -MODELS.index(r.m)):
        keep = keeps[row.key]
        if keep["rc"] != 0:
            continue
        for p in filter(again_p, POLICIES):
            sfuts[(row.key, p)] = pool.submit(row_job, row, p, keep)
    for row in rows:
        keep = keeps[row.key]
        if keep["rc"] != 0:
            continue
        if row.why:
            for frac in WHY_BUDGETS:
                for p in filter(again_p, ("delta", "autoswap", "dtr")):
                    wfuts[(row.key, frac, p)] = pool.submit(why_job, row, p, keep, frac)
    mb = has_maxbatch()
    if not mb:
        log("this delta has no maxbatch command: the max-batch table is left out")

    for row in rows:
        key = row.key
        keep = keeps[key]
        entry = {"keep": keep, "search": {}, "runs": {}}
        for p in POLICIES:
            if (key, p) in sfuts:
                found, runs = sfuts[(key, p)].result()
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


def table_head(w, cols):
    w("| " + " | ".join(cols) + " |")
    w("|" + "---|" * len(cols))


def best_peer(e, f):
    """(value, peer) of the peer with the largest f(e, peer), or (None, "")."""
    peers = [(f(e, p), p) for p in PEERS if f(e, p) is not None]
    return max(peers) if peers else (None, "")


def label(r):
    return f"{r.m[1]} {r.m[3].split(',')[0]}"


def counts(rows, data):
    """Over the rows whose keep ran: where delta saves at least as much as
    every peer (per threshold), at least the published 40% at 1.3x, and
    where its max batch is at or above the best peer's and the published
    ratio (fp32 rows only: the papers' are fp32)."""
    t = collections.Counter()
    for r in rows:
        e = data["rows"].get(r.key)
        if not e or e["keep"]["rc"] != 0:
            continue
        t["n"] += 1
        for thr in THRESHOLDS:
            dv = saved(e, "delta", thr)
            bp = best_peer(e, lambda e, p: saved(e, p, thr))
            t[f"ge_peers_{thr}"] += (dv or 0) >= (bp[0] or 0)
        t["ge_40_13"] += (saved(e, "delta", 1.3) or 0) >= 0.40
        dv = batch_ratio(e, "delta")
        if dv is not None:
            bp = best_peer(e, batch_ratio)
            t["mb_rows"] += 1
            t["mb_peers"] += dv >= (bp[0] or 0)
            if r.m[4] and r.prec == "fp32":
                t["mb_n"] += 1
                t["mb_pub"] += dv >= r.m[4]
    return t


def saved_cells(e, keep, thr):
    """delta's and the best peer's cells at thr: saved (and the budget in
    GiB when keep is given)."""
    def fmt(v):
        if v is None:
            return "—"
        return f"{v:.0%}" + (f" ({gib((1 - v) * keep['baseline_peak'])} GiB)" if keep else "")
    dv = saved(e, "delta", thr)
    bp = best_peer(e, lambda e, p: saved(e, p, thr))
    return [fmt(dv), f"{fmt(bp[0])} ({bp[1]})" if bp[0] is not None else "—"]


def mb_cells(e):
    """delta's and the best peer's max-batch cells."""
    dv = batch_ratio(e, "delta")
    bp = best_peer(e, batch_ratio)
    dx = e.get("maxbatch", {}).get("by_policy", {}).get("delta")
    return [("not run" if not dx else "not finished" if dv is None else f"×{dv:.2f}"),
            "—" if bp[0] is None else f"×{bp[0]:.2f} ({bp[1]})"]


def mb_where(rows):
    """Where the max-batch searches ran, in words."""
    out = []
    for g in dict.fromkeys(r.gpu for r in rows if r.mb):
        on = [r for r in rows if r.gpu == g]
        some = [r for r in on if r.mb]
        out.append(NAMES.get(g, g) + ("" if len(some) == len(on) else
                                      " (" + ", ".join(dict.fromkeys(label(r) for r in some)) + ")"))
    return ", ".join(out) if out else "no device"


def headline(rows, data, mb, w):
    """The summary table of the fp32 rows: delta, the best peer and the
    published figures; then the same counts for the bf16 rows."""
    main = [r for r in rows if r.main]
    w("## Headline\n")
    w("Memory saved at ≤ 1.1× and ≤ 1.3× keep's step time, and the largest batch against keep's, "
      "for delta and for the best of the five peers in the same cell (which peer in brackets), in "
      "fp32; published DELTA figures from ../shared/REFERENCES.md: 40–72% memory saved (per model "
      "figures not given), max batch ×2.04 ResNet-50, ×2.25 ResNet-101, ×5.5 GPT2-Large, ×6 GPT2-XL. "
      "The max-batch searches are slow in real time and ran on the " + mb_where(main) +
      " only (—: not searched). bf16: \"Mixed precision\" below.\n")
    table_head(w, ["row", "device", "delta saved ≤1.1×", "best peer", "delta saved ≤1.3×",
                   "best peer", "delta max batch", "best peer", "published max batch"])
    for r in main:
        e = data["rows"][r.key]
        if e["keep"]["rc"] != 0:
            continue
        cells = saved_cells(e, None, 1.1) + saved_cells(e, None, 1.3)
        cells += mb_cells(e) if mb and r.mb else ["—", "—"]
        cells.append(f"×{r.m[4]}" if r.m[4] else "—")
        w(f"| {label(r)} | {r.dev} | " + " | ".join(cells) + " |")
    w("")
    t = counts(main, data)
    w(f"Counted over the {t['n']} rows: delta saves at least as much as every peer in "
      f"{t['ge_peers_1.1']} at ≤ 1.1× and {t['ge_peers_1.3']} at ≤ 1.3×; it saves at least "
      f"the published lower bound of 40% at ≤ 1.3× in {t['ge_40_13']}." +
      (f" Its max batch is at or above the best measured peer's in {t['mb_peers']} of the "
       f"{t['mb_rows']} rows where delta's search finished, and at or above the published ratio "
       f"in {t['mb_pub']} of the {t['mb_n']} rows that have one." if mb else ""))
    bf = [r for r in rows if r.prec == "bf16"]
    if bf:
        t = counts(bf, data)
        w(f"In bf16 ({', '.join(dict.fromkeys(r.dev for r in bf))}), over the {t['n']} rows: "
          f"delta saves at least as much as every peer in {t['ge_peers_1.1']} at ≤ 1.1× and "
          f"{t['ge_peers_1.3']} at ≤ 1.3×, and at least 40% at ≤ 1.3× in {t['ge_40_13']}" +
          (f"; its max batch is at or above the best peer's in {t['mb_peers']} of the "
           f"{t['mb_rows']} rows where its search finished" if mb else "") + ".")
    w("")


def saved_table(rows, data, thr, w, prec_col):
    table_head(w, ["row", "device"] + (["precision"] if prec_col else []) + POLICIES)
    for r in rows:
        e = data["rows"][r.key]
        cells = []
        for p in POLICIES:
            f = e["search"].get(p, {}).get(str(thr))
            cells.append("—" if not f else f"{1 - f['frac']:.0%} ({f['overhead']:.2f}×)")
        best = max((1 - (e["search"].get(p, {}).get(str(thr)) or {"frac": 1})["frac"], p)
                   for p in POLICIES)
        cells = [f"**{c}**" if p == best[1] and best[0] > 0 else c
                 for c, p in zip(cells, POLICIES)]
        w(f"| {r.m[0]} | {r.dev} | " + (f"{r.prec} | " if prec_col else "") +
          " | ".join(cells) + " |")
    w("")


def why_cells(data, r, frac):
    """The mix and the three overheads of row r at budget frac, or None
    when keep failed: (delta's run, cells)."""
    keep = data["rows"][r.key]["keep"]
    if keep["rc"] != 0:
        return None, None
    k = f"{r.key}@{frac}@"
    x = {p: data["why"].get(k + p) for p in ("delta", "autoswap", "dtr")}
    ov = {p: (f"{x[p]['step_s'] / keep['step_s']:.2f}×" if x[p] and x[p]["rc"] == 0
              else "refused" if x[p] and x[p]["rc"] == 3 else
              "not measured (over the time limit)" if x[p] and x[p]["rc"] == -1 else
              f"failed ({x[p]['err'][:40]})" if x[p] else "")
          for p in x}
    dr = x["delta"]
    ok = bool(dr and dr["rc"] == 0)
    cols = ([gib(dr["swap_out"]), gib(dr["dropped"]), f"{dr['stall_s']:.3f}",
             f"{dr['recompute_s']:.3f}"] if ok else ["", "", "", ""])
    return x, {"ok": ok, "ov": ov, "keep": keep, "cols": cols, "mix": " | ".join(cols)}


def why_tally(tally, x):
    dr = x["delta"]
    if not (dr and dr["rc"] == 0):
        return
    tally["n"] += 1
    tally["both"] += dr["swap_out"] > 0 and dr["dropped"] > 0
    tally["le_both"] += all(not (x[p] and x[p]["rc"] == 0) or
                            dr["step_s"] <= x[p]["step_s"] + 1e-12 for p in ("autoswap", "dtr"))
    tally["only"] += sum(1 for p in ("autoswap", "dtr") if x[p] and x[p]["rc"] != 0)


def why_refused(tally, x):
    """Counts a cell whose delta run was refused (the budget below what
    delta can fit) or failed otherwise."""
    dr = x and x["delta"]
    if dr and dr["rc"] != 0:
        tally["delta_refused" if dr["rc"] == 3 else "delta_failed"] += 1


def share(dr):
    """The swapped share of what delta released (swapped out + dropped)."""
    tot = dr["swap_out"] + dr["dropped"]
    return dr["swap_out"] / tot if tot > 0 else None


def maxbatch_table(rows, data, w, prec_col):
    table_head(w, ["row", "device"] + (["precision"] if prec_col else []) +
               ["published", "keep"] + POLICIES)
    cmds = []
    for r in rows:
        bp = data["rows"][r.key].get("maxbatch", {}).get("by_policy", {})

        def cell(p):
            x = bp.get(p)
            if not x:
                return "not run"
            if "max_batch" not in x:
                return ("not finished" if x.get("status") == "timeout"
                        else f"error: {x.get('err', '')[:60]}")
            if x["max_batch"] == 0:
                return f"none ({x.get('limited_by', x.get('status'))})"
            q = x.get("ratio_to_keep")
            sps = x.get("samples_per_s")
            return (f"{x['max_batch']}" +
                    (f" (×{q:.2f})" if isinstance(q, (int, float)) and p != "keep" else "") +
                    (f", {sps:.1f}/s" if isinstance(sps, (int, float)) and x["max_batch"] else ""))
        pub = f"×{r.m[4]}" if r.m[4] and r.prec == "fp32" else "—"
        w(f"| {label(r)} | {r.dev} | " + (f"{r.prec} | " if prec_col else "") +
          f"{pub} | {cell('keep')} | " + " | ".join(cell(p) for p in POLICIES) + " |")
        cmds += [x["cmd"] for x in bp.values() if "cmd" in x]
    w("")
    return cmds


def left_out(rows, data):
    """The max-batch searches that did not finish or did not run, in words."""
    out = []
    for r in rows:
        bp = data["rows"][r.key].get("maxbatch", {}).get("by_policy", {})
        miss = [p for p in POLICIES if "max_batch" not in (bp.get(p) or {})]
        if miss:
            out.append(f"{label(r)} {r.prec} on the {r.dev}: " + ", ".join(
                p + (" (not finished)" if (bp.get(p) or {}).get("status") == "timeout"
                     else " (not run)" if not bp.get(p) else " (error)") for p in miss))
    return out


def write_md(rows, data, mb):
    o = []
    w = o.append
    headline(rows, data, mb, w)
    main = [r for r in rows if r.main]
    order = {g: i for i, g in enumerate(NAMES)}
    mp = sorted((r for r in rows if r.mp),
                key=lambda r: (MODELS.index(r.m), order.get(r.gpu, 99), r.prec != "fp32"))
    w("## Configurations\n")
    w(f"Every simulated row: the presets of docs/DEVICE.md (datasheet figures, and the host clock's "
      f"launch costs), except the fp32 tables' H200, which is a device file `delta calibrate "
      f"--backend cuda` wrote on a lent H200 (its measured rates, efficiency curves per kind of op "
      f"and factors per op type, host costs; docs/DEVICE.md, \"Device files\"): with it the "
      f"simulator predicted that GPU's keep steps within 13% and 31 of 36 measured policy "
      f"overheads within 15% (docs/results_gpu.md), where the datasheet preset puts ResNet-50's "
      f"keep step at half the measured one. Steps of one fixed shape, {STEPS} steps per run, a run's step time the median "
      "over the steps after the first third. The unconstrained peak is keep's (the dry plan's "
      "lifetime-planned arena: parameters, gradients, optimizer state, inputs, activations and "
      "workspace all count). Two precisions:\n")
    w("- **fp32** (every table but the bf16 rows of \"Mixed precision\"): every op on the CUDA "
      "cores, as the papers measured and as PyTorch runs by default; the simulator prices a "
      "product (matmul, linear, convolution and their gradients) at the preset's fp32 peak, no "
      "tensor cores, no TF32.")
    w("- **bf16** (`--precision bf16`; docs/KERNELS.md, \"Mixed precision\"): PyTorch autocast's "
      "rule — parameters, their gradients and the optimizer state fp32 (master weights), "
      "activations and products BF16. A product with BF16 operands is priced at the preset's dense "
      "BF16 tensor-core peak; every other op, as in fp32, at the fp32 rate or by its bytes at the "
      "HBM rate (half the bytes for a BF16 tensor). The host link is the same in both. BF16 "
      "kernels read and write BF16 themselves and compute in fp32; only the convolution family "
      "widens its operands into fp32 copies (the cpu's im2col convolutions; cuDNN on a GPU uses "
      "that space as its workspace), and those copies are workspace the budget counts, so a "
      "convolutional model's bf16 minimum budget can exceed its fp32 one.\n")
    devs = device_info()
    for g in [g for g in NAMES if any(r.gpu == g for r in rows)]:
        if g in devs:
            how = (f"--gpu-file {os.path.relpath(DEVICE_FILES[g], ROOT)}"
                   if g in DEVICE_FILES else f"--gpu {g}")
            w(f"- {NAMES[g]} (`{how}`): {devs[g][0]}")
    w("")
    table_head(w, ["row", "model", "configuration", "device", "precision", "keep s/step",
                   "unconstrained peak", "minimum budget"])
    for r in sorted(rows, key=lambda r: (MODELS.index(r.m), order.get(r.gpu, 99), r.prec != "fp32")):
        k = data["rows"][r.key]["keep"]
        over = k["rc"] == 0 and r.gpu in devs and k["peak"] > devs[r.gpu][1]
        cell = (f"{k['step_s']:.4f} | {gib(k['peak'])} GiB" +
                (" (over the device: keep needs more than it has; the simulator "
                 "runs it anyway, as on a slightly larger device)" if over else "") +
                f" | {gib(k['min_budget'])} GiB"
                if k["rc"] == 0 else f"failed | {k['err']} |")
        w(f"| {r.m[0]} | {r.m[1]} | {r.m[3]} | {r.dev} | {r.prec} | {cell} |")
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
        saved_table(main, data, thr, w, False)
    stopped = sum(1 for e in data["rows"].values() for runs in e["runs"].values()
                  for r in runs.values() if r["rc"] == -1)
    total = sum(len(runs) for e in data["rows"].values() for runs in e["runs"].values())
    w("Each cell: memory saved (the overhead measured at that budget); bold: the most saved. "
      f"{total} runs in all (the mixed-precision section's included); {stopped} were stopped for "
      "taking too long in real time (the simulator is deterministic but not free: delta's online "
      "steps at small budgets recompute and compact heavily) and counted as over the threshold.\n")

    w("## Why each choice: what delta released, and what it cost\n")
    w(f"On the simulated {NAMES[WHY_DEVICE]}, per step (means over the steady steps): the bytes delta swapped "
      "out and the bytes it dropped to recompute, the seconds compute stalled waiting for "
      "transfers and the seconds spent recomputing, and its overhead beside the swap-only "
      "(autoswap) and recompute-only (dtr) peers at the same budget. The papers' argument — "
      "swapping is not always the best first choice — reads off the mix: where the link can hide "
      "the transfers delta swaps, where it cannot it recomputes.\n")
    w("| row | budget | swapped out GiB | dropped GiB | stall s | recompute s | delta | autoswap (swap only) | dtr (recompute only) |")
    w("|---|---|---|---|---|---|---|---|---|")
    tally = collections.Counter()
    for r in main:
        if r.gpu != WHY_DEVICE:
            continue
        for frac in WHY_BUDGETS:
            x, c = why_cells(data, r, frac)
            if not c:
                continue
            w(f"| {r.m[0]} | {frac:.0%} | {c['mix']} | {c['ov']['delta']} | {c['ov']['autoswap']} | {c['ov']['dtr']} |")
            why_tally(tally, x)
    w("")
    w(f"Of the {tally['n']} cells delta ran, it both swapped and dropped in {tally['both']}, and was "
      f"at least as fast as the swap-only and the recompute-only peer in {tally['le_both']}; "
      f"in {tally['only']} cells one of those peers could not run the budget at all (refused: "
      "dtr cannot move parameters, gradients or optimizer state, which exceed the budget there).\n")

    mbrows = [r for r in main if r.mb]
    w("## Maximum batch against keep\n")
    if not mb:
        w("Not measured: this build of delta has no `maxbatch` command.\n")
    else:
        w(f"`delta maxbatch` on the simulated {mb_where(main)}, each policy searched beside keep "
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
        cmds = maxbatch_table(mbrows, data, w, False)
        if cmds:
            w(f"For example: `{cmds[0]}`.\n")

    if mp:
        mixed_precision(mp, data, mb, w)

    if "sim_at" in data:
        w(f"The simulated figures above were measured from {data['sim_at']} in "
          f"{data['sim_s'] / 60:.0f} minutes" +
          (f"; the max-batch searches from {data['maxbatch_at']} in {data['maxbatch_s'] / 60:.0f} minutes"
           if "maxbatch_at" in data else "") + ".\n")
    if "why_at" in data:
        w(f"The mixed-precision section's why-table runs were measured again "
          f"(`MODE=why`, last at {data['why_at']}; a run the first pass stopped at its time limit, "
          "or a column added since, is then measured).\n")
    if data.get("again"):
        w(f"Measured again then (`AGAIN={','.join(data['again'])}`): "
          f"{', '.join(data['again'])}; every other policy's figures and the max-batch searches "
          f"are from the run of {data['others_at']}.\n")
    open(os.path.join(OUT, "sim.md"), "w").write("\n".join(o) + "\n")


def peaks(devs, rows):
    """The rows' devices' fp32 and bf16 peaks, in words, from their
    `--gpu help` descriptions."""
    out = {}
    for r in rows:
        d = devs.get(r.gpu, ("",))[0]
        try:
            f32 = float(d.split(" TFLOP/s fp32")[0].rsplit(", ", 1)[1])
            b16 = float(d.split(" TFLOP/s bf16")[0].rsplit(", ", 1)[1])
        except (IndexError, ValueError):
            continue
        out.setdefault((b16, f32), []).append(r.dev)
    return "; ".join(f"{b:.0f} against {f:.0f} TFLOP/s fp32, {b / f:.0f}×" +
                     ("" if len(out) == 1 else f" on the {' and '.join(dict.fromkeys(n))}")
                     for (b, f), n in out.items()) or "see Configurations"


def link_rate(desc):
    """The host link's bytes/s from a `--gpu help` description."""
    try:
        return float(desc.rsplit("link ", 1)[1].split(" GB/s")[0]) * 1e9
    except (IndexError, ValueError):
        return None


def mp_paragraph(data, pairs, byk):
    """How and why delta's choices moved from fp32 to bf16, in words whose
    figures and directions come from the runs above."""
    rng = lambda v, f: "–" if not v else (f(min(v)) if f(min(v)) == f(max(v))
                                          else f"{f(min(v))}–{f(max(v))}")
    pc = lambda v: f"{v:.0%}"
    xx = lambda v: f"{v:.2f}×"
    both = []  # (m, g, fp32 row, bf16 row) whose keeps ran
    for m, g in pairs:
        a, b = byk.get((m[0], g, "fp32")), byk.get((m[0], g, "bf16"))
        if a and b and all(data["rows"][r.key]["keep"]["rc"] == 0 for r in (a, b)):
            both.append((m, g, a, b))
    if not both:
        return ""

    def why(r, frac, p):
        x = data["why"].get(f"{r.key}@{frac}@{p}")
        return x if x and x["rc"] == 0 else None

    def ov(r, frac, p):
        x = why(r, frac, p)
        return x and x["step_s"] / data["rows"][r.key]["keep"]["step_s"]

    out = []
    # the mix, budget by budget
    for frac in WHY_BUDGETS:
        cells = [(share(why(a, frac, "delta")), share(why(b, frac, "delta")))
                 for m, g, a, b in both if why(a, frac, "delta") and why(b, frac, "delta")]
        cells = [(x, y) for x, y in cells if x is not None and y is not None]
        if not cells:
            continue
        down = sum(1 for x, y in cells if y < x - 0.05)
        up = sum(1 for x, y in cells if y > x + 0.05)
        stall = [(why(a, frac, "delta")["stall_s"] / data["rows"][a.key]["keep"]["step_s"],
                  why(b, frac, "delta")["stall_s"] / data["rows"][b.key]["keep"]["step_s"])
                 for m, g, a, b in both if why(a, frac, "delta") and why(b, frac, "delta")]
        ovs = [(ov(a, frac, "delta"), ov(b, frac, "delta"))
               for m, g, a, b in both if why(a, frac, "delta") and why(b, frac, "delta")]
        out.append(
            f"at {frac:.0%} of each peak the swapped share fell by more than 5 points in {down} "
            f"of {len(cells)} pairs and rose in {up} (fp32 {rng([x for x, _ in cells], pc)}, "
            f"bf16 {rng([y for _, y in cells], pc)}); the stall was "
            f"{rng([x for x, _ in stall], pc)} of keep's step in fp32 and "
            f"{rng([y for _, y in stall], pc)} in bf16, delta's overhead "
            f"{rng([x for x, _ in ovs], xx)} against {rng([y for _, y in ovs], xx)}")
    refused = [(f"{m[1]} on the {NAMES.get(g, g)} at {frac:.0%}", bool(why(b, frac, "autoswap")))
               for frac in WHY_BUDGETS for m, g, a, b in both
               if (data["why"].get(f"{b.key}@{frac}@delta") or {}).get("rc") == 3]
    text = ("**How the director's choices moved.** Delta's mix, fp32 against bf16 in the same "
            "model, device and budget fraction: " + "; ".join(out) + "." +
            (f" delta was refused at {len(refused)} bf16 budgets ({', '.join(n for n, _ in refused)}"
             f", just above bf16's minimum budget; autoswap ran {sum(1 for _, ok in refused if ok)} "
             "of them)."
             if refused else ""))

    # memory at a bounded overhead, in GiB
    def budget(r, thr):
        s = saved(data["rows"][r.key], "delta", thr)
        return None if s is None else (1 - s) * data["rows"][r.key]["keep"]["baseline_peak"]
    sent = []
    for thr in THRESHOLDS:
        gb = [(budget(a, thr), budget(b, thr)) for m, g, a, b in both]
        gb = [(x, y) for x, y in gb if x is not None and y is not None]
        sv = [(saved(data["rows"][a.key], "delta", thr), saved(data["rows"][b.key], "delta", thr))
              for m, g, a, b in both]
        sv = [(x, y) for x, y in sv if x is not None and y is not None]
        if gb:
            sent.append(f"at ≤ {thr}× delta saved {rng([x for x, _ in sv], pc)} of the fp32 peak "
                        f"and {rng([y for _, y in sv], pc)} of the bf16 one, and its bf16 budget "
                        f"was at or above its fp32 budget in GiB in {sum(1 for x, y in gb if y >= x - 2**20)} "
                        f"of {len(gb)} pairs")
    spd = [data["rows"][a.key]["keep"]["step_s"] / data["rows"][b.key]["keep"]["step_s"]
           for m, g, a, b in both]
    byt = [data["rows"][b.key]["keep"]["baseline_peak"] / data["rows"][a.key]["keep"]["baseline_peak"]
           for m, g, a, b in both]
    rec = [tuple(why(r, 0.7, "delta")["recompute_s"] / data["rows"][r.key]["keep"]["step_s"]
                 for r in (a, b)) for m, g, a, b in both if why(a, 0.7, "delta") and why(b, 0.7, "delta")]
    text += (" **Why.** bf16 halves what there is to move (keep's peak is "
             f"{rng(byt, pc)} of fp32's) but shortens the step it must hide behind "
             f"{rng(spd, lambda v: f'{v:.1f}')}× (the products run at the BF16 peak, the "
             "memory-bound ops at most 2× faster), and the host link is the same: moving keep's "
             f"peak over it takes {rng([x * y for x, y in zip(byt, spd)], lambda v: f'{v:.1f}')} "
             "times as many steps (above). Recomputation got dearer too, measured against "
             "the step: at 70% delta's recomputation took " +
             (f"{rng([x for x, _ in rec], pc)} of keep's step in fp32 and "
              f"{rng([y for _, y in rec], pc)} in bf16" if rec else "–") +
             ". So a byte released costs more of the step "
             "either way, and delta releases fewer bytes at the same overhead. Memory at a bounded "
             "overhead: " + "; ".join(sent) + ".")

    # the peers
    dtr = [(saved(data["rows"][a.key], "dtr", 1.1), saved(data["rows"][b.key], "dtr", 1.1))
           for m, g, a, b in both]
    dtr = [(x or 0, y or 0) for x, y in dtr]
    d70 = [(ov(a, 0.7, "dtr"), ov(b, 0.7, "dtr")) for m, g, a, b in both]
    d70 = [(x, y) for x, y in d70 if x and y]
    comp = [(why(a, 0.7, "dtr"), why(b, 0.7, "dtr")) for m, g, a, b in both]
    comp = [(x["defrag_bytes"], y["defrag_bytes"]) for x, y in comp
            if x and y and "defrag_bytes" in x and "defrag_bytes" in y]
    best13 = collections.Counter(
        best_peer(data["rows"][b.key], lambda e, p: saved(e, p, 1.3))[1] for m, g, a, b in both)
    text += (f" The recompute-only peer fell furthest: dtr saved {rng([x for x, _ in dtr], pc)} at "
             f"≤ 1.1× in fp32 and {rng([y for _, y in dtr], pc)} in bf16" +
             (f", its overhead at 70% going from {rng([x for x, _ in d70], xx)} to "
              f"{rng([y for _, y in d70], xx)}" if d70 else "") +
             (f", while it moved {rng([x / 2**30 for x, _ in comp], lambda v: f'{v:.1f}')} GiB a "
              f"step within the arena to compact it in fp32 and "
              f"{rng([y / 2**30 for _, y in comp], lambda v: f'{v:.1f}')} GiB in bf16 (a likely "
              "cause, not isolated here: BF16 convolutions widen into fp32 workspace, larger "
              "transient blocks to find room for)" if comp else "") +
             ". At ≤ 1.3× the best peer in bf16 is " +
             ", ".join(f"{p} in {n}" for p, n in best13.most_common()) + f" of {len(both)} rows.")
    mbx = lambda r, p: ((data["rows"][r.key].get("maxbatch", {}).get("by_policy", {}).get(p) or {})
                        .get("max_batch"))
    mb = [(mbx(a, "keep"), mbx(b, "keep"), mbx(a, "delta"), mbx(b, "delta"),
           batch_ratio(data["rows"][a.key], "delta"), batch_ratio(data["rows"][b.key], "delta"))
          for m, g, a, b in both]
    mb = [x for x in mb if all(isinstance(v, (int, float)) and v for v in x)]
    sps = [(data["rows"][b.key]["maxbatch"]["by_policy"]["keep"]["samples_per_s"] /
            data["rows"][a.key]["maxbatch"]["by_policy"]["keep"]["samples_per_s"])
           for m, g, a, b in both if mbx(a, "keep") and mbx(b, "keep")]
    if mb:
        text += (f" Largest batch: keep's is {rng([y / x for x, y, *_ in mb], lambda v: f'{v:.1f}')}× "
                 "larger in bf16 (half the activation bytes) and its samples/s, which set the "
                 f"throughput floor, {rng(sps, lambda v: f'{v:.1f}')}× higher; delta's own "
                 "largest batch moved "
                 f"{rng([d / c for _, _, c, d, _, _ in mb], lambda v: f'{v:.2f}')}× (bf16 over fp32), "
                 f"so its ratio to keep's fell from ×{rng([e for *_, e, _ in mb], lambda v: f'{v:.1f}')} "
                 f"to ×{rng([f for *_, f in mb], lambda v: f'{v:.1f}')}.")
    mins = [(m[1], data["rows"][a.key]["keep"]["min_budget"], data["rows"][b.key]["keep"]["min_budget"])
            for m, g, a, b in both]
    hi = list(dict.fromkeys(n for n, x, y in mins if y > x))
    if hi:
        text += (f" bf16's minimum budget is above fp32's for {', '.join(hi)} (the "
                 "convolutions' widened operands: fp32 copies that are workspace the budget "
                 "counts; docs/KERNELS.md).")
    return text + "\n"


def mixed_precision(mp, data, mb, w):
    """The bf16 section: the MP_MODELS rows on MP_DEVICES in fp32 and bf16,
    side by side, and what moved in delta's mix."""
    devs = device_info()
    names = list(dict.fromkeys(r.dev for r in mp))
    w(f"## Mixed precision: bf16 on the simulated {' and '.join(names)}\n")
    w("The same searches in fp32 and in bf16 (`--precision bf16`, see Configurations) on the same "
      "simulated device. A bf16 row's unconstrained peak and keep step are bf16 keep's own, so its "
      "percentages are of a smaller total: each cell also gives the budget in GiB. What bf16 "
      "changes for a memory manager: the products run at the tensor cores' BF16 peak (on these "
      f"presets {peaks(devs, mp)}) while the other ops, bound by HBM, gain at most "
      "the 2× of their halved bytes, and the host link stays where it was — so a step has less "
      "compute to hide a transfer behind.\n")
    table_head(w, ["row", "device", "precision", "keep s/step", "peak", "delta saved ≤1.1×",
                   "best peer", "delta saved ≤1.3×", "best peer", "delta max batch", "best peer"])
    for r in mp:
        e = data["rows"][r.key]
        k = e["keep"]
        if k["rc"] != 0:
            w(f"| {label(r)} | {r.dev} | {r.prec} | failed: {k['err'][:60]} | | | | | | | |")
            continue
        cells = saved_cells(e, k, 1.1) + saved_cells(e, k, 1.3)
        cells += mb_cells(e) if mb and r.mb else ["—", "—"]
        w(f"| {label(r)} | {r.dev} | {r.prec} | {k['step_s']:.4f} | {gib(k['peak'])} GiB | " +
          " | ".join(cells) + " |")
    w("")
    for thr in THRESHOLDS:
        w(f"### bf16 and fp32 at ≤ {thr}× keep's step time\n")
        saved_table(mp, data, thr, w, True)

    w("### What delta released in bf16, and what it cost\n")
    w("As in \"Why each choice\", at 70/50/30% of each precision's own peak: delta's bytes swapped "
      "out and dropped per step, the swapped share of what it released (swapped / (swapped + "
      "dropped)), the stall and the recomputation, its overhead beside the swap-only and the "
      "recompute-only peer at the same budget, and the bytes delta's and dtr's steps moved "
      "within the arena to compact it (`defrag_bytes`: an online step makes room for a block "
      "by moving live ones; a replayed plan needs none).\n")
    table_head(w, ["row", "device", "budget", "precision", "swapped out GiB", "dropped GiB",
                   "swapped share", "stall s", "recompute s", "delta", "autoswap (swap only)",
                   "dtr (recompute only)", "compacted GiB: delta, dtr"])
    pairs = [(MODELS[i], g) for i, g in
             dict.fromkeys((MODELS.index(r.m), r.gpu) for r in mp)]
    byk = {(r.m[0], r.gpu, r.prec): r for r in mp}
    tally = {p: collections.Counter() for p in ("fp32", "bf16")}
    moves, shares = [], {"fp32": [], "bf16": []}
    for m, g in pairs:
        for frac in WHY_BUDGETS:
            got = {}
            for prec in ("fp32", "bf16"):
                r = byk.get((m[0], g, prec))
                if not r:
                    continue
                x, c = why_cells(data, r, frac)
                if not c:
                    continue
                b = frac * c["keep"]["baseline_peak"]
                sh = share(x["delta"]) if c["ok"] else None
                cols = c["cols"][:2] + ["" if sh is None else f"{sh:.0%}"] + c["cols"][2:]
                w(f"| {m[0]} | {r.dev} | {frac:.0%} ({gib(b)} GiB) | {prec} | " +
                  " | ".join(cols) +
                  f" | {c['ov']['delta']} | {c['ov']['autoswap']} | {c['ov']['dtr']} | " +
                  ", ".join(gib(x[p]["defrag_bytes"]) if x[p] and "defrag_bytes" in x[p] else "–"
                            for p in ("delta", "dtr")) + " |")
                why_tally(tally[prec], x)
                why_refused(tally[prec], x)
                if sh is not None:
                    got[prec] = sh
                    shares[prec].append(sh)
            if len(got) == 2:
                moves.append(got["bf16"] - got["fp32"])
    w("")

    # the figures the paragraph below rests on
    fewer = sum(1 for d in moves if d < -0.05)
    more = sum(1 for d in moves if d > 0.05)
    mean = lambda v: sum(v) / len(v) if v else float("nan")
    speed, hide = [], []
    for m, g in pairs:
        a, b = byk.get((m[0], g, "fp32")), byk.get((m[0], g, "bf16"))
        if not a or not b:
            continue
        ka, kb = data["rows"][a.key]["keep"], data["rows"][b.key]["keep"]
        if ka["rc"] != 0 or kb["rc"] != 0:
            continue
        speed.append(ka["step_s"] / kb["step_s"])
        bw = link_rate(devs.get(g, ("", 0))[0])
        if bw:  # keep steps it takes to move the whole peak over the link once
            hide.append((m[1], NAMES.get(g, g), ka["peak"] / bw / ka["step_s"],
                         kb["peak"] / bw / kb["step_s"]))
    t32, t16 = tally["fp32"], tally["bf16"]
    w(f"Of the {t16['n']} bf16 cells delta ran, it both swapped and dropped in {t16['both']} "
      f"(fp32: {t32['both']} of {t32['n']}) and was at least as fast as the swap-only and the "
      f"recompute-only peer in {t16['le_both']} (fp32: {t32['le_both']}); in {t16['only']} bf16 "
      f"cells one of those peers could not run the budget at all, and delta itself was refused "
      f"in {t16['delta_refused']} (fp32: {t32['delta_refused']})" +
      (f" and failed otherwise in {t16['delta_failed'] + t32['delta_failed']}"
       if t16["delta_failed"] + t32["delta_failed"] else "") + ". The swapped share of what delta "
      f"released moved, bf16 against fp32 in the same cell, down by more than 5 points in "
      f"{fewer} of {len(moves)} cells and up by more than 5 in {more}; its mean went from "
      f"{mean(shares['fp32']):.0%} in fp32 to {mean(shares['bf16']):.0%} in bf16. Keep's bf16 step "
      f"is {min(speed):.1f}–{max(speed):.1f}× shorter than its fp32 step (not 15×: only the "
      "products speed up that much), and moving keep's whole peak over the link once takes " +
      "; ".join(f"{a} on the {d}: {x:.1f} fp32 steps, {y:.1f} bf16 steps" for a, d, x, y in hide) +
      ".\n")
    w(mp_paragraph(data, pairs, byk))
    w("")

    if mb:
        w("### Maximum batch in bf16\n")
        w(f"As \"Maximum batch against keep\", on the {' and '.join(names)} in both precisions "
          f"(each search stopped after {data.get('mb_timeout', MB_TIMEOUT):.0f} s of real time).\n")
        maxbatch_table([r for r in mp if r.mb], data, w, True)
        miss = left_out([r for r in mp if r.mb], data)
        if miss:
            w("Left out (not finished in the time limit, or not run because the run was "
              "stopped first): " + "; ".join(miss) + ".\n")


if __name__ == "__main__":
    main()
