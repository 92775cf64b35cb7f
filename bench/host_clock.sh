#!/usr/bin/env bash
# The host against the device on the simulated H100: every policy's
# overhead (median step / keep's) at 70/50/30% of the unconstrained peak,
# with the host waiting for every op (the first runtime, --sync-every-op)
# and running ahead (the asynchronous runtime), for ResNet-50 224x224
# batch 64 and GPT-2 small T1024 batch 8. Usage: bench/host_clock.sh
# [build/delta]. Deterministic (the simulator): one round is enough.
set -u
bin=${1:-build/delta}
gpu=${GPU:-h100-80g}
steps=${STEPS:-12}
declare -A jobs=(
    [resnet50]="--model resnet50 --batch 64 --optimizer adamw"
    [gpt2-small]="--model gpt2-small --batch 8 --seq-len 1024 --optimizer adamw"
)
median_step() { # the median step after the first third, from a --json log
    python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if "step_s" in r and "step" in r]
t = sorted(r["step_s"] for r in steps[len(steps) // 3:])
n = len(t)
print(t[n // 2] if n % 2 else 0.5 * (t[n // 2 - 1] + t[n // 2]))
PY
}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for model in resnet50 gpt2-small; do
    echo "### sim $gpu: $model (${jobs[$model]})"
    echo
    echo "| policy | runtime | 70% | 50% | 30% |"
    echo "|---|---|---|---|---|"
    declare -A keep_s=()
    for mode in sync async; do
        extra=""
        [ "$mode" = sync ] && extra="--sync-every-op"
        "$bin" train ${jobs[$model]} --backend sim --gpu "$gpu" --steps "$steps" \
            --policy keep $extra --json "$log" --quiet >/dev/null 2>&1 || true
        keep_s[$mode]=$(median_step "$log")
    done
    printf "| keep (step) | host waits %.4f s, host ahead %.4f s | | | |\n" "${keep_s[sync]}" "${keep_s[async]}"
    for pol in swap checkpoint dtr capuchin autoswap delta; do
        for mode in sync async; do
            extra=""
            [ "$mode" = sync ] && extra="--sync-every-op"
            row="| $pol | $([ "$mode" = sync ] && echo "host waits" || echo "host ahead") |"
            for b in 70% 50% 30%; do
                if "$bin" train ${jobs[$model]} --backend sim --gpu "$gpu" \
                    --steps "$steps" --budget "$b" --policy "$pol" $extra \
                    --json "$log" --quiet >/dev/null 2>&1; then
                    s=$(median_step "$log")
                    row+=" $(python3 -c "print(f'{$s / ${keep_s[async]}:.2f}x')") |"
                else
                    row+=" - |"
                fi
            done
            echo "$row"
        done
    done
    echo
done
echo "Overheads are against keep with the host ahead; '-': refused or failed."
