#!/usr/bin/env bash
# Run several reproduction commands side by side on one GPU for a fixed time, then pack what
# finished: for a machine held for a limited time (a lease, a job slot).
#   scripts/gpu-batch.sh SECONDS PLAN OUT      (or @EPOCH: stop at that time, e.g. set before a
#                                               build that comes first: @$(( $(date +%s) + 570 )))
# PLAN: a file with one command per line (e.g. `scripts/reproduce-dynmem.sh --config
# configs/dynmem/gpu.json --jobs 3 --resume`), all started at once after the Multi30k data-bins are
# prepared (BPE and word level, both directions: concurrent engines must not prepare one data-bin at
# the same time). Each command is stopped when SECONDS (counted from this script's start) are up;
# give the engines --stop-after so that they start no run that cannot finish by then. OUT receives
# results.tgz (every file under results/ that the commands wrote, without the generate dumps, so
# that runs added to a CPU table come back too) and logs.tgz (each command's output).
# NVIDIA's MPS daemon is started when there is none, so that the processes' kernels share the GPU
# rather than take turns (measured: 13 small trainings at once finished in 2.1-4.2 minutes under
# MPS; 19 without it had not finished in 8). PREPARE=0: the data-bins are there already. Prefix
# with `scripts/offline-gpu.sh run DIR --` on a machine without a package index.
set -u
start=$(date +%s)
[ $# -eq 3 ] || { sed -n '2,16p' "${BASH_SOURCE[0]}" | cut -c3- >&2; exit 2; }
hard=$1 plan=$2 out=$3
case $hard in
    @*) hard=$(( ${hard#@} - start )) ;;  # a deadline given as a time
esac
[[ $hard =~ ^[0-9]+$ ]] && [ "$hard" -gt 0 ] || {
    echo "gpu-batch: the time left must be a positive number of seconds or a later @EPOCH; got $1" >&2
    exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
mkdir -p "$out"
logs=$(mktemp -d)
touch "$logs/started"  # what the commands write under results/ is newer than this
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$logs/gpu.txt" 2>&1
if command -v nvidia-cuda-mps-control >/dev/null; then
    # by its command line: the daemon's name is longer than the 15 characters `pgrep -x` compares,
    # and a daemon left by an earlier batch on a machine still held is used, not stopped
    if pgrep -f '(^|/)nvidia-cuda-mps-control( |$)' >/dev/null; then
        echo "gpu-batch: MPS already running" | tee -a "$logs/gpu.txt"
        mps=1
    elif nvidia-cuda-mps-control -d && timeout 60 python3 -c \
            "import torch; assert torch.ones(3, device='cuda').sum().item() == 3"; then
        echo "gpu-batch: MPS started" | tee -a "$logs/gpu.txt"
        mps=1
    else
        echo quit | nvidia-cuda-mps-control 2>/dev/null
        echo "gpu-batch: MPS unavailable; processes take turns on the GPU" | tee -a "$logs/gpu.txt"
    fi
fi
pack() {
    find results -type f -newer "$logs/started" ! -name 'generate*.txt' -print0 2>/dev/null \
        | tar czf "$out/results.tgz" --null -T -
    tar czf "$out/logs.tgz" -C "$logs" .
    ls -l "$out"
}
t=$(date +%s)
pids=() names=()
[ "${PREPARE:-1}" = 0 ] || for pair in "de en" "en de"; do
    set -- $pair
    scripts/prepare-multi30k.sh "$1" "$2" > "$logs/prepare-$1-$2.log" 2>&1 &
    pids+=($!) names+=("prepare-$1-$2")
    scripts/prepare-multi30k.sh "$1" "$2" --bpe-merges 0 --nwords-src 10004 --nwords-tgt 10004 \
        --no-joined-dictionary --out "data-bin/multi30k-word.$1-$2" \
        > "$logs/prepare-word-$1-$2.log" 2>&1 &
    pids+=($!) names+=("prepare-word-$1-$2")
done
failed=0
for k in "${!pids[@]}"; do
    wait "${pids[$k]}" && continue
    failed=1
    echo "gpu-batch: ${names[$k]} failed; the end of its log:" >&2
    tail -n 5 "$logs/${names[$k]}.log" >&2
done
if [ "$failed" = 1 ]; then
    # every command would fail the same way: stop before spending the machine's time
    echo "gpu-batch: no command started (the data-bins could not be made; raw Multi30k is read from \$MULTI30K_DIR, else ../shared/data/multi30k, which a GPU node may not have: scripts/offline-gpu.sh data DIR copies it into DIR)" >&2
    pack
    exit 1
fi
echo "gpu-batch: data prepared in $(( $(date +%s) - t )) s"
left=$(( hard - ($(date +%s) - start) ))
i=0
while IFS= read -r cmd; do
    [ -z "$cmd" ] && continue
    i=$((i + 1))
    echo "gpu-batch: [$i] $cmd ($left s left)"
    timeout -k 5 "$left" bash -c "$cmd" > "$logs/command-$i.log" 2>&1 &
done < "$plan"
wait
echo "gpu-batch: commands ended at $(( $(date +%s) - start )) s"
for f in "$logs"/command-*.log; do
    echo "== $f"
    grep -E "^reproduce-[a-z]+: .*(BLEU|not run|error|skipped)" "$f" | tail -n 30
done
# the daemon is left for the next batch on the node; a timing there would go through it
if [ "${mps:-0}" = 1 ]; then
    echo "gpu-batch: NVIDIA's MPS daemon stays running for a next batch;" \
        "stop it before timing on this node (echo quit | nvidia-cuda-mps-control)"
fi
pack
