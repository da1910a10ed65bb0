#!/usr/bin/env bash
# Create (or reuse) the virtual environment and install ran_fairseq with the exact versions of
# requirements-lock.txt (setup.py states ranges; the lock makes the demo and CI reproducible).
#   VENV=path       where the environment lives (default: .venv in the checkout)
#   PYTHON=exe      the interpreter that creates it (default: python3)
#   EXTRAS=list     setup.py extras to install, comma-separated (default: test; make demo uses none)
#   SETUP_LOG=file  where pip's output goes (default: VENV/setup-env.log); its tail is shown on
#                   failure
#   BUILD_JOBS=N    compile fairseq's C++/Cython extensions N at a time (default: the CPU count)
#   LOCK=file       the constraints pip installs with (default: requirements-lock.txt; LOCK= : none,
#                   the newest versions within setup.py's ranges)
# Re-running is cheap: the install is skipped while setup.py, requirements-build.txt and the lock
# are unchanged
# and the extras asked for are installed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${VENV:-$root/.venv}
python=${PYTHON:-python3}
extras=${EXTRAS-test}
log=${SETUP_LOG:-$venv/setup-env.log}
lock=${LOCK-$root/requirements-lock.txt}
constraints=()
[ -n "$lock" ] && constraints=(-c "$lock")

stamp="$venv/.ran_fairseq-install-stamp"
want=$(cat "$root/setup.py" "$root/requirements-build.txt" ${lock:+"$lock"} | sha256sum | cut -d' ' -f1)
# The stamp holds the hash, then the extras installed with it in brackets ("[test]"); a stamp with
# the hash alone was written when every install included the test extras.
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ]; then
    read -r have_hash have_extras < "$stamp" || true
    have_extras=${have_extras:-[test]}
    have_extras=${have_extras#[}
    have_extras=${have_extras%]}
    if [ "${have_hash:-}" = "$want" ]; then
        missing=0
        for extra in ${extras//,/ }; do
            [[ ",${have_extras:-}," == *",$extra,"* ]] || missing=1
        done
        if [ "$missing" = 0 ]; then
            echo "setup-env: $venv is up to date"
            exit 0
        fi
        # keep what is installed: a later `make demo` must not drop the test extras
        [ -n "${have_extras:-}" ] && extras="$have_extras${extras:+,$extras}"
    fi
fi

mkdir -p "$(dirname "$log")"
: > "$log"
fail() {
    echo "setup-env: FAILED: $1; the last lines of $log:" >&2
    tail -n 30 "$log" | sed 's/^/    /' >&2
    exit 1
}
if [ ! -x "$venv/bin/python" ]; then
    echo "setup-env: creating virtual environment $venv"
    "$python" -m venv "$venv" >> "$log" 2>&1 || fail "$python -m venv $venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
# fairseq compiles extensions against torch/numpy/cython, so they come first and the package is
# installed without build isolation (an isolated build would fetch another torch).
echo "setup-env: installing build requirements (torch, numpy, cython); pip's output: $log"
"${pip[@]}" install "${constraints[@]}" -r "$root/requirements-build.txt" >> "$log" 2>&1 \
    || fail "pip install -r requirements-build.txt"
# fairseq's six extensions compile one after another by default; build_ext's `parallel` option,
# read from the extra distutils config that DIST_EXTRA_CONFIG names, builds BUILD_JOBS at a time.
# torch's BuildExtension drives ninja through one build.ninja per build folder, which extensions
# built at the same time overwrite (seen: "cannot find .../token_block_utils_fast.o"), so ninja is
# hidden from the build (a `ninja` that fails first on PATH makes torch use the plain compiler,
# one process per source file, as it does where ninja is not installed), and torch's ccache
# wrapper, which re-wraps a compiler that another thread has just wrapped, is switched off.
jobs=${BUILD_JOBS:-$(nproc 2>/dev/null || echo 1)}
build_dir=$(mktemp -d)
trap 'rm -rf "$build_dir"' EXIT
printf '[build_ext]\nparallel = %s\n' "$jobs" > "$build_dir/build.cfg"
printf '#!/bin/sh\nexit 1\n' > "$build_dir/ninja"
chmod +x "$build_dir/ninja"
echo "setup-env: installing ran_fairseq${extras:+[$extras]} and fairseq (the first time, fairseq" \
     "compiles its extensions, $jobs at a time: 1-3 minutes)"
PATH="$build_dir:$PATH" DIST_EXTRA_CONFIG=$build_dir/build.cfg TORCH_NO_COMPILER_WRAPPER=1 \
    "${pip[@]}" install "${constraints[@]}" --no-build-isolation -e "$root${extras:+[$extras]}" >> "$log" 2>&1 \
    || fail "pip install -e $root${extras:+[$extras]}"
echo "$want [$extras]" > "$stamp"
echo "setup-env: ready ($venv)"
