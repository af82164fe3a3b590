#!/usr/bin/env bash
# The offline GPU run (docs/runners.md): the gate, probe and repro groups of every cuda-* cell, then the
# engine-level bench, against the vLLM and torch of this machine's python3, within one deadline, into $OUT.
#   bash tools/gpu_run.sh [--budget S] [--bench-seconds S] [--jobs N] [--cells P]
# vLLM may come as unpacked files on PYTHONPATH (docs/device-run.md); the kit's
# pure-Python dependencies come from build/gpu-run/deps where the call carried them
# (`python -m repro.gpu_run prepare` stages them), else from python3's own packages.
set -euo pipefail
kit=$(cd "$(dirname "$0")/.." && pwd)
deps="$kit/build/gpu-run/deps"
if [ -d "$deps" ]; then
  PYTHONPATH="$deps${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$kit${PYTHONPATH:+:$PYTHONPATH}"
cd "$kit"
exec python3 -m repro.gpu_run --out "${OUT:?set OUT to the folder that comes back}" "$@"
