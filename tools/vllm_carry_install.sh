#!/usr/bin/env bash
# One device call's share of carrying vLLM to the lent GPU machine (docs/device-run.md). tools/vllm_carry.py
# copies this script into every chunk it writes, as install.sh, beside the chunk's piece of the stream, the
# number of pieces (total) and the stream's SHA-256 (sha256). Each call, from the kit's root:
#
#     bash CHUNK/install.sh CHUNK
#
# keeps the chunk's piece where the machine keeps files between calls; while pieces are missing it says how
# many it has. The call that brings the last one joins the pieces by number, checks them against the
# SHA-256, unpacks them into the site folder, installs the extra wheels there without any index, and says
# "vllm X ready" once vLLM imports from that folder alone. Then: export PYTHONPATH=<the site folder>.
set -euo pipefail

chunk=${1:?usage: bash CHUNK/install.sh CHUNK (a chunk folder tools/vllm_carry.py wrote)}
home=${VLLM_GPU_HOME:-${TMPDIR:-/tmp}/vllm-gpu}
site=$home/site
total=$(cat "$chunk/total")
sum=$(cat "$chunk/sha256")
case $total in '' | *[!0-9]*) echo "error: $chunk/total is not a number: prepare the chunks again" >&2; exit 2 ;; esac

# The pieces wait in a folder named after the stream they belong to, so a piece another preparation left on
# a machine still warm from an earlier run never mixes in.
pieces=$home/in/$sum
mkdir -p "$pieces"
cp "$chunk"/piece.* "$pieces/"

if [ "$(cat "$site/.done" 2>/dev/null || true)" != "$sum" ]; then
    have=0
    for ((k = 1; k <= total; k++)); do
        if [ -f "$pieces/piece.$k" ]; then have=$((have + 1)); fi
    done
    if [ "$have" -lt "$total" ]; then
        echo "have $have of $total chunks"
        exit 0
    fi
    # piece.1, piece.2, ..., piece.10 by their numbers: never in the order a listing sorts their names.
    joined() { for ((k = 1; k <= total; k++)); do cat "$pieces/piece.$k"; done; }
    if [ "$(joined | sha256sum | cut -d' ' -f1)" != "$sum" ]; then
        echo "error: the $total pieces in $pieces do not make the stream they were cut from: prepare and carry the chunks again" >&2
        exit 2
    fi
    rm -rf "$site"
    mkdir -p "$site"
    joined | tar xzf - -C "$site"
    wheels=("$site"/.wheels/*.whl)
    if [ -e "${wheels[0]}" ]; then
        PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore \
            python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "${wheels[@]}"
    fi
    rm -rf "$site/.wheels" "$home/in"
    echo "$sum" >"$site/.done"
fi
PYTHONPATH=$site python3 -c "import vllm; print('vllm', vllm.__version__, 'ready')"
