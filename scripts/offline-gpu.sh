#!/usr/bin/env bash
# ran_fairseq on a GPU machine that cannot reach a package index but whose python3 has a CUDA torch
# (a rented or lent box with a prebuilt image). Two steps:
#
#   scripts/offline-gpu.sh download DIR [PYVER]    where pip works: fetch into DIR the fairseq
#       source, the wheels of the plugin's other dependencies that such images lack, for CPython
#       PYVER (default 3.12) on x86-64 Linux (with the checkout's .venv, which has torch, or $PYTHON),
#       and copy the raw Multi30k into DIR/multi30k (the `data` step)
#   scripts/offline-gpu.sh data DIR                 copy the raw Multi30k ($MULTI30K_DIR, else
#       ../shared/data/multi30k) into DIR/multi30k: a machine that gets only the checkout has none
#   scripts/offline-gpu.sh run DIR -- COMMAND...    on the GPU machine: install them into $SITE
#       (default: a new private temporary folder, removed afterwards), then run COMMAND with the
#       plugin and them importable, and with MULTI30K_DIR=DIR/multi30k where DIR has it and
#       MULTI30K_DIR is unset
#
# `run` builds fairseq's wheel from its source the first time (its C++/Cython extensions, without
# the CUDA ones: 1-3 minutes) into $WHEEL_CACHE (default ~/.cache/ran_fairseq/offline-gpu-wheels,
# a folder only its owner can write: another user's wheel or sitecustomize.py is never taken), so
# that a later run on the same machine skips the build, and copies it to $WHEEL_OUT if set; a wheel
# in DIR is used as it is. torch, numpy and the rest of fairseq's needs are the image's own (fairseq
# is compiled against its numpy, 1.x or 2.x). Nothing is installed into the image's environment.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() { sed -n '2,22p' "${BASH_SOURCE[0]}" | cut -c3- >&2; exit 2; }
[ $# -ge 2 ] || usage
mode=$1 dir=$2
shift 2
python=${PYTHON:-python3}
FAIRSEQ=fairseq-fixed==0.12.3.1
# what fairseq and the plugin need beyond torch, numpy, sacrebleu and scikit-learn
DEPS=(hydra-core==1.3.2 omegaconf==2.3.0 bitarray==3.12.3 cffi==2.1.1 pycparser==3.12
      sacremoses==0.2.0 subword-nmt==0.3.8 mock==5.2.0)
SDISTS=(antlr4-python3-runtime==4.9.3)  # omegaconf's parser runtime: published as source only

copy_data() {
    # the raw Multi30k the data-bins are made from: a GPU node may get the checkout alone, not
    # the ../shared beside it
    local from=${MULTI30K_DIR:-$root/../shared/data/multi30k} f n=0
    mkdir -p "$dir/multi30k"
    for f in "$from"/{train,val,test_2016_flickr}.*.gz; do
        [ -f "$f" ] && install -m 0644 "$f" "$dir/multi30k/" && n=$((n + 1))
    done
    [ "$n" -gt 0 ] || { echo "offline-gpu: no raw Multi30k files {train,val,test_2016_flickr}.LANG.gz in $from; set MULTI30K_DIR to a folder that has them" >&2; exit 1; }
    echo "offline-gpu: copied $n raw Multi30k files from $from into $dir/multi30k"
}

case $mode in
data)
    copy_data
    ;;
download)
    # pip reads fairseq's metadata by running its setup.py, which imports torch: the checkout's
    # environment (make setup) has it, a bare python3 may not
    [ -z "${PYTHON:-}" ] && [ -x "$root/.venv/bin/python" ] && python=$root/.venv/bin/python
    pyver=${1:-3.12}
    mkdir -p "$dir"
    plats=()
    for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 \
             manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
        plats+=(--platform "$p")
    done
    "$python" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" \
        --implementation cp "${plats[@]}" -d "$dir" "${DEPS[@]}"
    # source archives as published; --no-build-isolation keeps pip from fetching a torch to read
    # fairseq's metadata (it needs the torch of the interpreter that runs this)
    "$python" -m pip download -q --no-deps --no-binary=:all: --no-build-isolation -d "$dir" \
        "$FAIRSEQ" "${SDISTS[@]}"
    copy_data
    ls -l "$dir"
    ;;
run)
    [ "${1:-}" = "--" ] && shift
    [ $# -ge 1 ] || usage
    # private folders only: a fixed name in /tmp could be made first by another user, with a
    # sitecustomize.py that python would run (the site is first on PYTHONPATH) or a wheel that
    # would be installed unchecked
    if [ -n "${SITE:-}" ]; then
        site=$SITE
    else
        site=$(mktemp -d "${TMPDIR:-/tmp}/offline-gpu-site.XXXXXX")
        trap 'rm -rf "$site"' EXIT
    fi
    pip=("$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir
         --target "$site" --upgrade)
    wheels=()
    for w in "$dir"/*.whl; do
        case $(basename "$w") in fairseq*) ;; *) wheels+=("$w") ;; esac
    done
    "${pip[@]}" "${wheels[@]}" "$dir"/antlr4-python3-runtime-*.tar.gz --no-build-isolation
    cache=${WHEEL_CACHE:-${XDG_CACHE_HOME:-${HOME:?HOME is unset: set WHEEL_CACHE}/.cache}/ran_fairseq/offline-gpu-wheels}
    mkdir -p "$cache"
    [ -n "${WHEEL_CACHE:-}" ] || chmod 700 "$cache"
    if [ ! -O "$cache" ] || [ -n "$(find "$cache" -maxdepth 0 -perm /022)" ]; then
        echo "offline-gpu: $cache is not a folder of yours that only you can write; its wheels are not taken. Set WHEEL_CACHE to one that is (mkdir -m 700 DIR)" >&2
        exit 1
    fi
    built=$(ls "$dir"/fairseq_fixed-*.whl "$cache"/fairseq_fixed-*.whl 2>/dev/null | head -n1 || true)
    if [ -n "$built" ]; then
        echo "offline-gpu: fairseq's wheel from an earlier build: $built" >&2
    else
        out=$cache
        mkdir -p "$out"
        tmp=$(mktemp -d)
        # extensions built side by side (see scripts/setup-env.sh for why ninja is hidden); no
        # CUDA_HOME: fairseq's CUDA extensions serve models this plugin does not use
        printf '[build_ext]\nparallel = %s\n' "$(nproc)" > "$tmp/build.cfg"
        printf '#!/bin/sh\nexit 1\n' > "$tmp/ninja"
        chmod +x "$tmp/ninja"
        echo "offline-gpu: building fairseq's wheel (1-3 minutes)" >&2
        start=$(date +%s)
        env -u CUDA_HOME PATH="$tmp:$PATH" DIST_EXTRA_CONFIG="$tmp/build.cfg" \
            TORCH_NO_COMPILER_WRAPPER=1 \
            "$python" -m pip wheel -q --no-deps --no-build-isolation --no-index -w "$out" \
            "$dir"/fairseq_fixed-*.tar.gz > "$tmp/build.log" 2>&1 \
            || { tail -n 40 "$tmp/build.log" >&2; exit 1; }
        echo "offline-gpu: built in $(( $(date +%s) - start )) s" >&2
        built=$(ls "$out"/fairseq_fixed-*.whl | head -n1)
        [ -z "${WHEEL_OUT:-}" ] || { mkdir -p "$WHEEL_OUT" && cp "$built" "$WHEEL_OUT/"; }
    fi
    "${pip[@]}" "$built"
    export PYTHONPATH="$site:$root${PYTHONPATH:+:$PYTHONPATH}"
    export PATH="$site/bin:$PATH"
    if [ -z "${MULTI30K_DIR:-}" ] && [ -d "$dir/multi30k" ]; then
        export MULTI30K_DIR=$(cd "$dir/multi30k" && pwd)
    fi
    "$python" -c "import fairseq, ran_fairseq, torch; print('offline-gpu: fairseq', fairseq.__version__, '| torch', torch.__version__, '| cuda', torch.cuda.is_available())" 2>&1 | grep -v tensorboardX >&2
    if [ -n "${SITE:-}" ]; then
        exec "$@"
    fi
    # not exec: the private site is removed when COMMAND ends (the EXIT trap); signals reach
    # COMMAND, which is in this shell's process group
    "$@"
    ;;
*)
    usage
    ;;
esac
