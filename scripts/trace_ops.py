#!/usr/bin/env python3
"""Where a step's time goes, from `delta train --trace FILE`: time per op
type on the compute stream (ops and recomputations), and the gaps between
them (the device idle: host work, waits on copies). On --backend cuda the
op times are GPU times, so this names the kernels to speed up. Then the
host's side from the trace's host track: its time issuing each op type
(the step loop's work, the launch inside it), less the throttle's waits for
the device, which says whether the host could keep a faster device fed.

Usage: trace_ops.py TRACE.json [STEP]   (STEP: default the last step)"""
import collections
import json
import re
import sys


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        d = json.load(open(sys.argv[1]))
    except (OSError, ValueError) as e:
        print(f"trace_ops: {sys.argv[1]}: {e}", file=sys.stderr)
        return 2
    ev = d["traceEvents"] if isinstance(d, dict) else d
    ops = [e for e in ev if e.get("ph") == "X" and e.get("tid") == 0
           and "step" in e.get("args", {})]
    if not ops:
        print("trace_ops: no ops on the compute stream in this trace",
              file=sys.stderr)
        return 1
    step = int(sys.argv[2]) if len(sys.argv) > 2 else max(e["args"]["step"] for e in ops)
    ops = sorted((e for e in ops if e["args"]["step"] == step), key=lambda e: e["ts"])
    if not ops:
        print(f"trace_ops: no step {step} in this trace", file=sys.stderr)
        return 1
    span = ops[-1]["ts"] + ops[-1]["dur"] - ops[0]["ts"]
    per = collections.defaultdict(lambda: [0, 0.0])
    busy = 0.0
    for e in ops:
        kind = op_kind(e["name"])
        if e.get("cat") != "op":
            kind += f" ({e.get('cat')})"
        per[kind][0] += 1
        per[kind][1] += e["dur"]
        busy += e["dur"]
    print(f"step {step}: {span / 1e3:.3f} ms from the first op's start to the "
          f"last op's end; ops {busy / 1e3:.3f} ms, gaps {(span - busy) / 1e3:.3f} ms")
    print(f"{'op':32} {'count':>6} {'ms':>10} {'share':>7}")
    for kind, (n, us) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        print(f"{kind:32} {n:6d} {us / 1e3:10.3f} {us / span * 100:6.1f}%")
    host_summary(ev, step)
    return 0


def op_kind(name):
    return re.sub(r"_\d+$", "", re.sub(r"\(.*\)$", "", name))


def host_summary(ev, step):
    """The host track (tid 4): per op type the host's time on its ops (the
    "host" spans less the "throttle" waits inside them) and the launches'."""
    spans = [e for e in ev if e.get("ph") == "X" and e.get("tid") == 4
             and e.get("args", {}).get("step") == step]
    if not spans:
        return
    per = collections.defaultdict(lambda: [0, 0.0, 0.0])
    total = {"host": 0.0, "launch": 0.0, "throttle": 0.0}
    for e in spans:
        cat = e.get("cat")
        if cat not in total:
            continue
        total[cat] += e["dur"]
        row = per[op_kind(e["name"])]
        if cat == "host":
            row[0] += 1
            row[1] += e["dur"]
        elif cat == "launch":
            row[2] += e["dur"]
        else:
            row[1] -= e["dur"]  # waiting for the device is not the host's work
    work = total["host"] - total["throttle"]
    print(f"\nhost, step {step}: {work / 1e3:.3f} ms issuing ops (launches "
          f"{total['launch'] / 1e3:.3f} ms), {total['throttle'] / 1e3:.3f} ms "
          f"waiting for the device (the run-ahead bound)")
    print(f"{'op':32} {'count':>6} {'host ms':>10} {'launch ms':>10} {'us/op':>8}")
    for kind, (n, us, launch) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        if n:
            print(f"{kind:32} {n:6d} {us / 1e3:10.3f} {launch / 1e3:10.3f} "
                  f"{us / n:8.1f}")


if __name__ == "__main__":
    sys.exit(main())
