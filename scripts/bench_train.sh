#!/usr/bin/env bash
# make bench-train: training throughput of delta beside PyTorch CPU on the
# same jobs and threads (a benchmark, not a test):
#   ResNet-18 on Fashion-MNIST 1x28x28, batch 64, SGD        -> samples/s
#   GPT-2-shaped, 4 layers, 128 wide, 4 heads, T 64, vocab 256,
#   batch 8, AdamW                                           -> tokens/s
# delta's figure is its median step (delta train --json summary); PyTorch's
# is the mean over the same number of steps after warm-up. Ratio = delta /
# PyTorch at the same thread count (goal >= 1). PyTorch on one thread is
# shown too: on small models its 2-thread runs can be slower than 1-thread.
set -eu
bin=${1:-build/delta}
threads=${THREADS:-2}
steps=${STEPS:-30}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

field() { # field FILE KEY: a number from the JSON summary line
    grep '"summary"' "$1" | sed -e "s/.*\"$2\":\([0-9.e+-]*\).*/\1/"
}

"$bin" train --model resnet18 --channels 1 --image-size 28 --classes 10 \
    --batch 64 --optimizer sgd --steps "$steps" --threads "$threads" \
    --quiet --json "$tmp/r.jsonl" >/dev/null
"$bin" train --model gpt2-tiny --layers 4 --hidden 128 --heads 4 --seq-len 64 \
    --vocab 256 --data synthetic --batch 8 --optimizer adamw --steps "$steps" \
    --threads "$threads" --quiet --json "$tmp/g.jsonl" >/dev/null
d_r=$(field "$tmp/r.jsonl" samples_per_s)
d_g=$(field "$tmp/g.jsonl" tokens_per_s)

py=/usr/bin/python3
t_r=- t_g=- o_r=- o_g=-
if $py -c 'import torch, torchvision' 2>/dev/null; then
    out=$($py scripts/bench_train_torch.py "$threads" "$steps")
    t_r=$(echo "$out" | awk '/^resnet18/ {print $3}')
    t_g=$(echo "$out" | awk '/^gpt2/ {print $3}')
    out=$($py scripts/bench_train_torch.py 1 "$steps")
    o_r=$(echo "$out" | awk '/^resnet18/ {print $3}')
    o_g=$(echo "$out" | awk '/^gpt2/ {print $3}')
else
    echo "(python3-torch or python3-torchvision not installed: delta's figures only)"
fi
echo "training throughput, $threads threads, $steps steps"
printf '%-44s %10s %10s %7s %12s\n' job delta pytorch ratio "pytorch 1t"
row() {
    if [ "$3" = - ]; then r=-; else r=$(awk -v a="$2" -v b="$3" 'BEGIN {printf "%.2f", a / b}'); fi
    printf '%-44s %10.1f %10s %7s %12s\n' "$1" "$2" "$3" "$r" "$4"
}
row "resnet18 fashion-mnist b64 sgd (samples/s)" "$d_r" "$t_r" "$o_r"
row "gpt2 4x128 T64 b8 adamw (tokens/s)" "$d_g" "$t_g" "$o_g"
