"""A step for vLLM's own Buildkite pipeline: a pull request that touches the pinned-memory gate runs the kit's 24-cell
gate against itself.

The step has the shape of the steps in vLLM's ``.buildkite/test-pipeline.yaml``: a label, the path prefixes of the
vLLM tree whose change opts the step in (``source_file_dependencies``), the directory its commands start in, and
the commands. vLLM's CI image has the pull request's vLLM installed, so the kit runs against that one
(``--vllm installed``, nothing installed over it) and needs no GPU: the gate presents each cell's host to vLLM and
stands in for the GPU it lacks. ``python -m matrix vllm-step --kit URL`` prints the step, to paste into that
file.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from matrix.errors import MatrixError

# The files of vLLM whose code the gate runs or reads, as prefixes of paths in vLLM's tree. A kit test holds this
# list to every vLLM module the gate's code imports or names (tests/kit/test_vllm_step.py).
GATE_SOURCES = (
    "vllm/__init__.py",  # the version every result is filed under
    "vllm/envs.py",  # the variables the gate and the engine read
    "vllm/logger.py",  # warning_once: the WSL warnings (0.25's circular import came through it)
    "vllm/platforms/",  # each platform's is_pin_memory_available, in_wsl and the WSL2 kernel check
    "vllm/utils/__init__.py",  # where older releases keep is_pin_memory_available and is_uva_available
    "vllm/utils/platform_utils.py",  # where newer releases keep them
    "vllm/utils/torch_utils.py",  # the import-time PIN_MEMORY decision
    "vllm/config/",  # the runner vLLM picks (use_v2_model_runner), the offload config
    "vllm/engine/arg_utils.py",  # EngineArgs: the reproduction's arguments become the engine config
    "vllm/v1/worker/gpu/buffer_utils.py",  # the V2 runner's UVA buffers and their fallback
    "vllm/v1/worker/gpu/model_runner.py",  # whether the V2 runner installs the CPU-weight offloader
    "vllm/v1/worker/gpu_model_runner.py",  # the V1 runner: a release without it runs V2 alone (0.34.0)
    "vllm/model_executor/offloader/",  # the CPU-weight offloader's path (UVA, pinned or pageable copies)
    "vllm/model_executor/model_loader/",  # what loads the weights imports under the cell's host
    "vllm/tokenizers/",  # the tiny model's tokenizer, through vLLM (newer releases)
    "vllm/transformers_utils/tokenizer.py",  # the same (older releases)
    "vllm/transformers_utils/__init__.py",  # the package of the architecture-config convertor
    "vllm/transformers_utils/model_arch_config_convertor.py",  # which architectures vLLM reads as MoE
    "vllm/third_party/pynvml.py",  # the NVML the stand-in GPU answers for
)

LABEL = "WSL2 pinned-memory gate (vllm-wslpin-kit, 24 cells, no GPU)"
NOX = "nox==2026.10.20"
# Where the kit is checked out in the step's container: outside vLLM's tree, which it must not shadow.
CHECKOUT = "/tmp/vllm-wslpin-kit"


def step(kit: str) -> dict[str, object]:
    """The step: check out the kit at ``kit`` (a git URL, optionally ``URL@REF``), run its gate against the installed
    vLLM, and fail on a cell whose answer breaks the kit's expectations (``summary --strict`` in the session)."""
    url, ref = kit, ""
    # A ref follows the URL's last '@' where no '/' or ':' comes after it (git@host:org/kit.git names no ref).
    if kit.rfind("@") > max(kit.rfind("/"), kit.rfind(":")):
        url, _, ref = kit.rpartition("@")
    if not url or any(part.startswith("-") or not part.isprintable() or " " in part for part in (url, ref)):
        raise MatrixError(f"--kit {kit!r}: give the kit's git URL, optionally URL@REF (a tag or branch)")
    branch = f"--branch {shlex.quote(ref)} " if ref else ""
    return {
        "label": LABEL,
        "source_file_dependencies": list(GATE_SOURCES),
        "working_dir": "/vllm-workspace",
        "commands": [
            f"git clone --depth 1 {branch}{shlex.quote(url)} {CHECKOUT}",
            f"pip install '{NOX}' -e '{CHECKOUT}[cell]'",
            f"cd {CHECKOUT} && nox --no-venv -s gate -- --vllm installed",
        ],
    }


def to_yaml(step: dict[str, object]) -> str:
    """One item of the pipeline's ``steps:`` list. Every string is written double-quoted with JSON's escapes, which
    YAML reads the same, so no command's colon, quote or ``#`` can change what the file means."""
    lines = []
    for index, (key, value) in enumerate(step.items()):
        lead = "- " if index == 0 else "  "
        if isinstance(value, list):
            lines.append(f"{lead}{key}:")
            lines.extend(f"  - {json.dumps(item)}" for item in value)
        else:
            lines.append(f"{lead}{key}: {json.dumps(value)}")
    return "\n".join(lines) + "\n"


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Print a step for vLLM's .buildkite/test-pipeline.yaml that runs the kit's gate on a pull request "
        "touching the pinned-memory gate.",
    )
    parser.add_argument(
        "--kit", required=True, help="the kit's git URL, optionally URL@REF (a tag or branch without '/')"
    )
    parser.set_defaults(func=_print)
    return parser


def _print(args: argparse.Namespace) -> int:
    sys.stdout.write(to_yaml(step(args.kit)))
    return 0
