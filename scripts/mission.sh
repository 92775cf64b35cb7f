#!/usr/bin/env bash
# The main job (`make run`): what delta is for, in two runs. ResNet-18 (base
# width 16) learns Fashion-MNIST twice with the same seed: once with every
# tensor kept on the device (no budget), once inside a fraction of that
# memory with the delta policy. Then it prints each run's peak device
# memory, the memory saved, the step-time overhead, and checks that the two
# runs' final weights are bit-identical (every tensor of the two --save
# files, byte for byte) and their test accuracy the same.
#
#   scripts/mission.sh DELTA [OUT]
#     DELTA   the delta binary (build/delta)
#     OUT     folder for the runs' files (default build/run): keep.safetensors,
#             delta.safetensors and their --json logs
#   environment: BUDGET (default 40%), STEPS (default 300), BATCH (128),
#                DELTA_RUN_ARGS (more options for both runs, e.g. --threads 2)
# Exit status: 0 when the weights are identical and the accuracies equal, 1
# when they are not, else the failing run's own status.
set -u
delta=${1:?usage: scripts/mission.sh DELTA [OUT]}
out=${2:-build/run}
budget=${BUDGET:-40%}
steps=${STEPS:-300}
batch=${BATCH:-128}
mkdir -p "$out" || exit 1

common=(--model resnet18 --width 16 --batch "$batch" --steps "$steps" --lr 0.05
        ${DELTA_RUN_ARGS:-})

# one field of a --json log's summary line (a number, or null)
field() { tail -n 1 "$1" | grep -o "\"$2\":[^,}]*" | head -n 1 | cut -d: -f2; }

run() { # NAME LABEL OPTIONS...
    local name=$1 label=$2
    shift 2
    echo
    echo "== $label =="
    rm -f "$out/$name.jsonl"
    local t0=$SECONDS
    "$delta" train "${common[@]}" "$@" --save "$out/$name.safetensors" \
        --json "$out/$name.jsonl"
    local rc=$?
    if [ $rc -ne 0 ]; then
        echo "mission: the $label run failed (exit $rc)" >&2
        exit $rc
    fi
    eval "wall_$name=\$((SECONDS - t0))"
}

echo "delta trains the same network twice: with all the memory it wants, then"
echo "inside $budget of that peak with the delta policy, which swaps tensors to host"
echo "memory and recomputes others, overlapping both with compute."
run keep "1/2: unconstrained (policy keep, no budget)"
run delta "2/2: inside a budget of $budget (policy delta)" --budget "$budget"

# Tensors compared byte for byte: a safetensors file is an 8-byte header
# length, the JSON header, then the tensors' bytes. The headers (names,
# dtypes, shapes, offsets) must agree once their metadata is set aside, and
# the data sections must be the same bytes.
hlen() { head -c 8 "$1" | od -An -tu8 | tr -d ' '; }
header() { head -c $((8 + $(hlen "$1"))) "$1" | tail -c +9 |
           sed 's/"__metadata__":{[^}]*},\{0,1\}//'; }
a=$out/keep.safetensors b=$out/delta.safetensors
identical=no
if [ "$(header "$a")" = "$(header "$b")" ] &&
   cmp -s <(tail -c +$((9 + $(hlen "$a"))) "$a") <(tail -c +$((9 + $(hlen "$b"))) "$b"); then
    identical=yes
fi
n_tensors=$(header "$a" | grep -o '"data_offsets"' | wc -l)
data_bytes=$(( $(stat -c %s "$a") - 8 - $(hlen "$a") ))

kp=$(field "$out/keep.jsonl" peak_device_bytes)
dp=$(field "$out/delta.jsonl" peak_device_bytes)
db=$(field "$out/delta.jsonl" budget_bytes)
ks=$(field "$out/keep.jsonl" median_step_s)
ds=$(field "$out/delta.jsonl" median_step_s)
ka=$(field "$out/keep.jsonl" test_accuracy)
da=$(field "$out/delta.jsonl" test_accuracy)
kl=$(field "$out/keep.jsonl" final_loss)
dl=$(field "$out/delta.jsonl" final_loss)
swapped=$(field "$out/delta.jsonl" swap_out_bytes)
recomputed=$(field "$out/delta.jsonl" recomputed_ops)

awk -v kp="$kp" -v dp="$dp" -v db="$db" -v ks="$ks" -v ds="$ds" -v ka="$ka" \
    -v da="$da" -v kl="$kl" -v dl="$dl" -v sw="$swapped" -v rc="$recomputed" \
    -v steps="$steps" -v budget="$budget" -v wk="$wall_keep" -v wd="$wall_delta" '
function mib(x) { return sprintf("%.1f MiB", x / 1048576) }
function acc(x) { return x == "null" ? "(no test set)" : sprintf("%.4f", x) }
BEGIN {
    printf "\n== what delta did ==\n"
    printf "%-26s %-16s %s\n", "", "unconstrained", "delta, budget " budget
    printf "%-26s %-16s %s\n", "peak device memory", mib(kp), mib(dp) " (of " mib(db) ")"
    printf "%-26s %-16s %s\n", "median step time", sprintf("%.3f s", ks), sprintf("%.3f s", ds)
    printf "%-26s %-16s %s\n", "run time (" steps " steps)", wk " s", wd " s"
    printf "%-26s %-16s %s\n", "final loss", sprintf("%.6f", kl), sprintf("%.6f", dl)
    printf "%-26s %-16s %s\n", "test accuracy", acc(ka), acc(da)
    printf "\nmemory saved:       %s of %s (%.0f%%)\n", mib(kp - dp), mib(kp), 100 * (kp - dp) / kp
    printf "step-time overhead: %.2fx (%s swapped out a step on average, %d ops recomputed in all)\n",
           ds / ks, mib(sw / steps), rc
}'
echo "final weights:      $([ $identical = yes ] && echo "bit-identical" || echo "DIFFERENT"):" \
     "$n_tensors tensors, $data_bytes bytes compared byte for byte ($a, $b)"
if [ "$ka" = null ] && [ "$da" = null ]; then
    echo "test accuracy:      none (no Fashion-MNIST test set: synthetic data)"
elif [ "$ka" = "$da" ]; then
    echo "test accuracy:      the same ($ka)"
else
    echo "test accuracy:      DIFFERENT ($ka unconstrained, $da in the budget)"
fi
echo "(timings are of a CPU with an emulated device and host link: docs/DEVICE.md)"
[ $identical = yes ] && [ "$ka" = "$da" ] || exit 1
