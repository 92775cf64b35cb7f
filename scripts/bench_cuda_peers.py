"""delta against what its users would pick instead: PyTorch's own memory
tools on `make bench-cuda`'s jobs, on the same GPU, and the table that sets
them beside delta's policies at delta's budgets.

  bench_cuda_peers.py run MODEL BATCH [T] [STEPS] [--modes LIST] [--amb LIST]
                          [--timeout S] [bench_cuda_torch.py's options]
      each configuration in its own process (scripts/bench_cuda_torch.py: a
      crash, a hang or a CUDA error loses that configuration only): eager,
      checkpoint (per block) and compile at each activation_memory_budget of
      --amb. One line each:
        config NAME step_s X peak_bytes Y [compile_s Z | first_step_s Z]
        config NAME failed: REASON
      NAME is eager, checkpoint or compile@AMB ("config compile failed: ..."
      once when this torch has no torch.compile or no activation_memory_budget).
  bench_cuda_peers.py report CELLS [--models LIST] [--budgets LIST]
                             [--policies LIST] [--only MODEL]
      the Markdown table from bench_cuda.sh's cell folder: CELLS/MODEL.peers
      (the lines above), CELLS/MODEL.torch (eager, when MODEL.peers has
      none) and delta's cells CELLS/MODEL.cuda.POLICY.BUDGET.{rc,jsonl}.

The mapping of budgets: delta's budgets are shares of delta keep's peak;
activation_memory_budget is a share of the activations the partitioner would
save by default, not of a peak, so it is not mapped by its value. Every
PyTorch configuration's peak is measured, and at each delta budget (in bytes,
budget_bytes of delta's cells) the fastest configuration whose measured peak
fits is delta's opponent. delta is "at least as fast at equal peak memory"
there when its fastest policy within the budget steps no slower."""
import argparse
import json
import os
import statistics
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
LABELS = {"resnet50": "ResNet-50, 3x224x224, batch 64, SGD",
          "gpt2": "GPT-2 small, T 1024, batch 8, AdamW"}


# ---- run ---------------------------------------------------------------------

def compile_missing():
    """Why torch.compile with a memory budget cannot run here, or None."""
    sys.path.insert(0, here)
    try:
        from bench_cuda_torch import compile_missing as why
    except ImportError as e:
        return f"cannot import torch ({e})"
    return why()


def run_one(base, mode, amb, timeout):
    """Runs one configuration; returns its output's key-value pairs, or
    {"failed": reason}."""
    cmd = [sys.executable, os.path.join(here, "bench_cuda_torch.py"), *base, "--mode", mode]
    if amb is not None:
        cmd += ["--amb", amb]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"failed": f"timed out after {timeout} s"}
    got = {}
    for line in p.stdout.splitlines():
        k, _, v = line.strip().partition(" ")
        if k == "failed:":
            return {"failed": v}
        got[k] = v
    if p.returncode == 0 and "step_s" in got and "peak_bytes" in got:
        return got
    err = [line for line in p.stderr.strip().splitlines() if line.strip()]
    return {"failed": f"exit {p.returncode}" + (f": {err[-1].strip()[:300]}" if err else "")}


def run(argv):
    p = argparse.ArgumentParser(prog="bench_cuda_peers.py run")
    p.add_argument("--modes", default="eager checkpoint compile",
                   help="of eager, checkpoint, compile (spaces or commas)")
    p.add_argument("--amb", default="1.0 0.6 0.3 0.1 0.0",
                   help="compile's activation_memory_budget values, largest first")
    p.add_argument("--timeout", type=int, default=900, help="seconds per configuration")
    a, base = p.parse_known_args(argv)
    modes = a.modes.replace(",", " ").split()
    ambs = a.amb.replace(",", " ").split()
    for mode in modes:
        if mode not in ("eager", "checkpoint", "compile"):
            p.error(f"unknown mode {mode}: eager, checkpoint or compile")
        if mode != "compile":
            emit(mode, run_one(base, mode, None, a.timeout))
            continue
        missing = compile_missing()
        if missing:
            emit("compile", {"failed": missing})
            continue
        stop = None
        for amb in ambs:
            name = f"compile@{amb}"
            if stop:  # the same failure again would only spend device time
                emit(name, {"failed": f"skipped: {stop}"})
                continue
            r = run_one(base, "compile", amb, a.timeout)
            if "failed" in r and "out of memory" not in r["failed"].lower():
                stop = f"{name} failed"
            emit(name, r)
    return 0


def emit(name, r):
    if "failed" in r:
        print(f"config {name} failed: {r['failed']}", flush=True)
        return
    extra = "".join(f" {k} {r[k]}" for k in ("compile_s", "first_step_s") if k in r)
    print(f"config {name} step_s {r['step_s']} peak_bytes {r['peak_bytes']}{extra}", flush=True)


# ---- report ------------------------------------------------------------------

def delta_cell(tmp, name, policy, budget):
    """One delta run of bench_cuda.sh: {"s": median step after the first
    third, "peak", "budget_bytes"} when it trained, {"failed": why} when it
    did not, None when it did not run."""
    base = os.path.join(tmp, f"{name}.cuda.{policy}.{budget}")
    if not os.path.exists(base + ".rc"):
        return None
    rc = int(open(base + ".rc").read().strip() or 1)
    steps = []
    if os.path.exists(base + ".jsonl"):
        for line in open(base + ".jsonl"):
            d = json.loads(line)
            if "step" in d and "step_s" in d:
                steps.append(d)
    if rc != 0 or not steps:
        return {"failed": "refused" if rc == 3 else f"exit {rc}"}
    tail = steps[len(steps) // 3:]
    return {"s": statistics.median(d["step_s"] for d in tail),
            "peak": max(d["peak_device_bytes"] for d in steps),
            "budget_bytes": steps[0].get("budget_bytes"),
            "baseline": steps[0].get("baseline_peak_bytes")}


def torch_configs(tmp, name):
    """PyTorch's configurations, {NAME: {"s", "peak", ...} or {"failed"}}."""
    out = {}
    f = os.path.join(tmp, name + ".peers")
    if os.path.exists(f):
        for line in open(f):
            w = line.split()
            if len(w) < 3 or w[0] != "config":
                continue
            if w[2] == "failed:":
                out[w[1]] = {"failed": " ".join(w[3:])}
                continue
            kv = dict(zip(w[2::2], w[3::2]))
            out[w[1]] = {"s": float(kv["step_s"]), "peak": int(kv["peak_bytes"]),
                         "compile_s": kv.get("compile_s")}
    f = os.path.join(tmp, name + ".torch")
    if "eager" not in out and os.path.exists(f):
        kv = dict(line.strip().partition(" ")[::2] for line in open(f))
        if "step_s" in kv and "peak_bytes" in kv:
            out = {"eager": {"s": float(kv["step_s"]), "peak": int(kv["peak_bytes"])}, **out}
    return out


def budget_bytes(tmp, name, budget, policies):
    """delta's budget in bytes: what its cells at that budget were given,
    else the share of keep's peak that delta plans with."""
    for p in policies:
        c = delta_cell(tmp, name, p, budget)
        if c and c.get("budget_bytes"):
            return c["budget_bytes"]
    keep = delta_cell(tmp, name, "keep", "unlimited")
    if keep and keep.get("baseline") and budget.endswith("%"):
        return int(keep["baseline"] * float(budget[:-1]) / 100)
    return None


def gib(n):
    return f"{n / 2**30:.2f} GiB"


def sp(c):
    return f"{c['s']:.4f} s, {gib(c['peak'])}"


def report(argv):
    p = argparse.ArgumentParser(prog="bench_cuda_peers.py report")
    p.add_argument("cells")
    p.add_argument("--models", default="resnet50 gpt2")
    p.add_argument("--budgets", default="70% 50% 30%")
    p.add_argument("--policies", default="delta swap checkpoint dtr capuchin autoswap")
    p.add_argument("--only", default="")
    a = p.parse_args(argv)
    policies, budgets = a.policies.split(), a.budgets.split()
    for name in a.models.split():
        if a.only and a.only != name:
            continue
        configs = torch_configs(a.cells, name)
        if not configs:
            continue
        label = LABELS.get(name, name)
        ok = {k: c for k, c in configs.items() if "failed" not in c}
        print(f"\n### {label}: delta against PyTorch's memory tools at delta's budgets\n")
        print("PyTorch's configurations (`scripts/bench_cuda_peers.py`; median step "
              "after 3 warm-up steps, CUDA events; peak = max_memory_allocated):\n")
        print("| PyTorch | s/step | peak | compile s |")
        print("|---|---|---|---|")
        for k, c in configs.items():
            if "failed" in c:
                print(f"| {k} | failed: {c['failed']} | | |")
            else:
                print(f"| {k} | {c['s']:.4f} | {gib(c['peak'])} | {c.get('compile_s') or ''} |")
        print("\nAt each budget, delta's fastest policy that trained within it, PyTorch's "
              "checkpoint, and the fastest torch.compile budget whose measured peak fits "
              "(`fastest PyTorch` also counts eager):\n")
        print("| budget | delta best: s/step, peak | torch checkpoint | torch.compile "
              "(activation_memory_budget) | fastest PyTorch within budget | delta at least "
              "as fast at equal peak memory |")
        print("|---|---|---|---|---|---|")
        for b in budgets:
            cap = budget_bytes(a.cells, name, b, policies)
            cells = {q: delta_cell(a.cells, name, q, b) for q in policies}
            ran = {q: c for q, c in cells.items() if c and "failed" not in c}
            best = min(ran, key=lambda q: ran[q]["s"]) if ran else None
            fits = {k: c for k, c in ok.items() if cap and c["peak"] <= cap}
            ck = configs.get("checkpoint")
            if ck is None:
                ck_txt = "not run"
            elif "failed" in ck:
                ck_txt = f"failed: {ck['failed']}"
            else:
                ck_txt = sp(ck) + ("" if not cap or "checkpoint" in fits else " (over budget)")
            comp = {k: c for k, c in fits.items() if k.startswith("compile@")}
            comp_all = {k: c for k, c in configs.items() if k.startswith("compile")}
            if comp:
                k = min(comp, key=lambda k: comp[k]["s"])
                comp_txt = f"{k.split('@')[1]}: {sp(comp[k])}"
            elif not comp_all:
                comp_txt = "not run"
            elif not any("failed" not in c for c in comp_all.values()):
                comp_txt = "failed: " + next(iter(comp_all.values()))["failed"]
            else:
                low = min((c for c in comp_all.values() if "failed" not in c), key=lambda c: c["peak"])
                comp_txt = f"none fits (lowest peak {gib(low['peak'])})"
            fast = min(fits, key=lambda k: fits[k]["s"]) if fits else None
            fast_txt = f"{fast}: {sp(fits[fast])}" if fast else "none"
            if not cap:
                verdict = "unknown (no budget in bytes: delta's cells are missing)"
            elif best and fast:
                r = ran[best]["s"] / fits[fast]["s"]
                verdict = f"{'yes' if r <= 1 else 'no'} (delta's step {r:.2f}x {fast}'s)"
            elif best:
                verdict = "yes (no PyTorch configuration fits)"
            elif fast:
                verdict = "no (no delta policy trained within the budget)"
            else:
                verdict = "neither fits"
            d_txt = f"{best}: {sp(ran[best])}" if best else "none trained"
            print(f"| {b} ({gib(cap) if cap else '?'}) | {d_txt} | {ck_txt} | {comp_txt} | "
                  f"{fast_txt} | {verdict} |")
    return 0


if __name__ == "__main__":
    cmds = {"run": run, "report": report}
    if len(sys.argv) < 2 or sys.argv[1] not in cmds:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(cmds[sys.argv[1]](sys.argv[2:]))
