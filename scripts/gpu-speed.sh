#!/usr/bin/env bash
# The GPU speed figures of the four architectures in one command, for one GPU job slot: each
# benchmark runs alone on the GPU (bench.py starts one worker per system, one after another), in
# order of importance, each stopped at the deadline so that what finished is packed.
#   scripts/gpu-speed.sh SECONDS|@EPOCH OUT [ONLY]
# SECONDS counts from this script's start; @EPOCH is a deadline fixed before an earlier step (e.g.
# a build: @$(( $(date +%s) + 570 ))). ONLY: comma-separated names of the benchmarks below to run.
#   ran-base            fairseq's transformer base against RAN-ALL base (configs/bench/ran-base.json):
#                       training tokens/s in float16; decoding sentences/s at beam 4, 100
#                       sentences a batch, every hypothesis forced to 30 and to 100 tokens; peak
#                       memory; the kernels the GPU ran per decoding step (torch.profiler)
#   recurrent-cross     Rosendahl et al.'s baseline and the nine recurrent systems at base size with
#                       the training flags of configs/recurrent_cross/full-wmt16-ro-en.json (float16,
#                       9,600-token batches): time per update (Table 2's training-time column)
#   dynmem, pervasive   configs/bench/dynmem.json and configs/bench/pervasive.json
#   ran-base-100        only when named in ONLY: ran-base's decoding at 100 tokens alone, nine
#                       passes over 500 sentences (the median reported), where three passes
#                       overlap between the two systems
# Every training benchmark first trains one untimed update on each timed batch (bench.py
# --warm-shapes): GPU libraries plan and autotune once per new batch shape, which a long training
# pays once and a 20-update timing would otherwise count.
# OUT receives speed.tgz (OUT-relative folders NAME/ with bench.json, bench.md and bench.log) and
# gpu-speed.log. The Multi30k de-en data-bin is prepared first when it is missing (PREPARE=0 skips).
# Prefix with `scripts/offline-gpu.sh run DIR --` on a machine without a package index.
set -u
start=$(date +%s)
[ $# -ge 2 ] && [ $# -le 3 ] || { sed -n '2,25p' "${BASH_SOURCE[0]}" | cut -c3- >&2; exit 2; }
deadline=$1 out=$2 only=${3:-}
case $deadline in
    @*) deadline=${deadline#@} ;;
    *) [[ $deadline =~ ^[0-9]+$ ]] && deadline=$(( start + deadline )) ;;
esac
[[ $deadline =~ ^[0-9]+$ ]] && [ "$deadline" -gt "$start" ] || {
    echo "gpu-speed: the time left must be a positive number of seconds or a later @EPOCH; got $1" >&2
    exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
python=${PYTHON:-python3}
mkdir -p "$out"
work=$(mktemp -d)
log=$out/gpu-speed.log
: > "$log"
say() { echo "gpu-speed: $*" | tee -a "$log" >&2; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >> "$log" 2>&1
# a batch of trainings (gpu-batch.sh) leaves NVIDIA's MPS daemon running on the node; timings
# taken through it are not those of a bare GPU, so say so (bench.json records it too: cuda_mps)
if pgrep -f '(^|/)nvidia-cuda-mps-control( |$)' >/dev/null 2>&1; then
    say "NVIDIA MPS daemon running: every timing below goes through its server (stop it with 'echo quit | nvidia-cuda-mps-control' for a bare GPU's figures)"
fi
data=data-bin/multi30k.de-en
if [ "${PREPARE:-1}" != 0 ] && [ ! -f "$data/dict.de.txt" ]; then
    PYTHON=$python scripts/prepare-multi30k.sh de en > "$work/prepare.log" 2>&1 \
        || { tail -n 20 "$work/prepare.log" | tee -a "$log" >&2; say "preparing $data failed"; exit 1; }
    say "prepared $data in $(( $(date +%s) - start )) s"
fi

wanted() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }
# bench NAME MIN_SECONDS BENCH_FLAGS...: run when wanted and at least MIN_SECONDS are left
bench() {
    local name=$1 need=$2 left
    shift 2
    wanted "$name" || return 0
    left=$(( deadline - $(date +%s) ))
    if [ "$left" -lt "$need" ]; then
        say "$name skipped: ${left} s left, it needs about ${need} s"
        return 0
    fi
    say "$name: starting with ${left} s left"
    local t0=$(date +%s)
    mkdir -p "$work/$name"
    # the log is kept naming the checkout's files relative to it, as bench.json does
    timeout --signal=TERM --kill-after=5 "$left" "$python" scripts/bench.py --data "$data" \
        --device cuda --out "$work/$name" "$@" 2>&1 | "$python" -m ran_lab.portable \
        > "$work/$name/bench.log"
    local rc=${PIPESTATUS[0]}
    say "$name: exit $rc after $(( $(date +%s) - t0 )) s"
    [ "$rc" = 0 ] || tail -n 15 "$work/$name/bench.log" | tee -a "$log" >&2
}

decode=(--beam 4 --decode-batch-size 100 --decode-sentences 500 --decode-repeats 3)
bench ran-base 90 --systems configs/bench/ran-base.json --fp16 --train-updates 30 \
    --warmup-updates 5 --warm-shapes "${decode[@]}" --decode-length 30 --also-decode-lengths 100 --cuda-launches
if [[ ",$only," == *",ran-base-100,"* ]]; then
    bench ran-base-100 150 --systems configs/bench/ran-base.json --fp16 --train-updates 1 \
        --warmup-updates 0 --beam 4 --decode-batch-size 100 --decode-sentences 500 \
        --decode-repeats 9 --decode-length 100
fi
train_only=(--train-updates 20 --warmup-updates 5 --warm-shapes --beam 4 --decode-batch-size 100
            --decode-sentences 100 --decode-length 30)
bench recurrent-cross 150 --systems configs/recurrent_cross/systems.json \
    --train-flags-of configs/recurrent_cross/full-wmt16-ro-en.json "${train_only[@]}"
bench dynmem 80 --systems configs/bench/dynmem.json --train-updates 20 --warmup-updates 5 \
    "${decode[@]}"
bench pervasive 60 --systems configs/bench/pervasive.json --train-updates 20 --warmup-updates 5 \
    --beam 4 --decode-batch-size 100 --decode-sentences 200 --max-len-a 0 --max-len-b 40

tar -czf "$out/speed.tgz" -C "$work" --exclude=prepare.log . && say "packed speed.tgz into the output folder"
say "done in $(( $(date +%s) - start )) s"
