# Shared by the prepare-* and reproduce-* scripts (sourced after they set $root, and $orig for
# downloads): the interpreter, the checkout on PYTHONPATH, downloads, unpacking.
python=${PYTHON:-}
if [ -z "$python" ]; then
    if [ -x "$root/.venv/bin/python" ]; then python=$root/.venv/bin/python; else python=python3; fi
fi
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
# the offline copy of Multi30k beside the checkout, where there is one (docs/data.md)
if [ -z "${MULTI30K_DIR:-}" ] && [ -d "$root/../shared/data/multi30k" ]; then
    MULTI30K_DIR=$(cd "$root/../shared/data/multi30k" && pwd)
    export MULTI30K_DIR
fi

fetch() {  # fetch URL FILE: download to FILE (through FILE.part) unless it is there already
    local url=$1 dest=$2
    [ -s "$dest" ] && return 0
    mkdir -p "$(dirname "$dest")"
    echo "downloading $url"
    if command -v curl >/dev/null; then
        curl -fL --retry 3 -o "$dest.part" "$url"
    elif command -v wget >/dev/null; then
        wget -O "$dest.part" "$url"
    else
        echo "error: curl or wget is needed to download $url" >&2
        exit 1
    fi
    mv "$dest.part" "$dest"
}

unpack() {  # unpack ARCHIVE DIR: extract a .tgz/.zip into DIR, once
    local archive=$1 dir=$2
    [ -f "$dir/.unpacked" ] && return 0
    rm -rf "$dir"
    mkdir -p "$dir"
    case $archive in
        *.zip) "$python" -m zipfile -e "$archive" "$dir" ;;
        *) tar -xzf "$archive" -C "$dir" ;;
    esac
    touch "$dir/.unpacked"
}

fetch_unpack() {  # fetch_unpack "PATH URL"...: each archive downloaded to $orig/PATH (once) and
                  # unpacked beside itself, minus its extension ($orig/PATH without .tgz/.zip)
    local entry name url
    for entry in "$@"; do
        read -r name url <<< "$entry"
        fetch "$url" "$orig/$name"
        unpack "$orig/$name" "$orig/${name%.*}"
    done
}

find_one() {  # find_one DIR NAME: the path of the single file called NAME under DIR
    local hits
    hits=$(find "$1" -type f -name "$2")
    if [ -z "$hits" ] || [ "$(printf '%s\n' "$hits" | wc -l)" -ne 1 ]; then
        echo "error: expected one file named $2 under $1, found: ${hits:-none}" >&2
        return 1
    fi
    printf '%s\n' "$hits"
}

pair() {  # pair CORPUS A B ARGS...: src/tgt from the first two ARGS (default A B), which must be
          # A B or B A; the remaining ARGS are left in pair_args
    local corpus=$1 a=$2 b=$3
    shift 3
    src=$a
    tgt=$b
    if [ $# -ge 2 ] && [[ $1 != -* ]]; then
        src=$1
        tgt=$2
        shift 2
    fi
    case "$src-$tgt" in
        "$a-$b" | "$b-$a") ;;
        *) echo "error: this is $corpus: SRC TGT must be '$a $b' or '$b $a', got '$src $tgt'" >&2
           exit 2 ;;
    esac
    pair_args=("$@")
}
