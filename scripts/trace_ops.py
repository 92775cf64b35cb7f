#!/usr/bin/env python3
"""Where a step's time goes, from `delta train --trace FILE`: time per op
type on the compute stream (ops and recomputations), and the gaps between
them (the device idle: host work, waits on copies). On --backend cuda the
op times are GPU times, so this names the kernels to speed up.

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
        kind = re.sub(r"_\d+$", "", re.sub(r"\(.*\)$", "", e["name"]))
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
