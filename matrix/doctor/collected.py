"""Another machine's set-up, from a file a person pastes: what ``vllm collect-env`` printed there, or the
environment record ``python -m matrix env`` wrote there (``--collect-env FILE``).

Users already paste collect-env's output into vLLM's issues; the doctor answers for the machine it describes.
collect-env says less than the kit's own record: the kernel (in ``Python platform``), torch's build, the GPUs
``nvidia-smi`` or torch lists, the installed vLLM and its ``VLLM_*`` variables; no WSL interop or device files,
which vLLM does not read either. Both are read as untrusted input: bounded, and refused in one line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from matrix.errors import MatrixError
from matrix.host.classify import Gpu, HostFacts
from matrix.host.record import EnvironmentRecord
from matrix.io.bounded_json import parse
from matrix.io.files import InputFileError, read_input

AGAIN = (
    "give what `vllm collect-env` (or `python -m vllm.collect_env`) printed on that machine, or the JSON of "
    "`python -m matrix env` there"
)
# collect-env's lines are `Key : value` (older releases: `Key: value`); its variables `NAME=value`.
_FIELD = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9 ().,/_-]*?)\s*:\s?(?P<value>.*)$")
_VARIABLE = re.compile(r"^(?P<name>[A-Z][A-Z0-9_]*)=(?P<value>.*)$")
_GPU = re.compile(r"^GPU \d+:\s*(?P<name>.+)$")
# platform.platform(): Linux-<release>-<machine>[-with-<libc>]; a release may hold dashes of its own.
_PLATFORM = re.compile(r"^Linux-(?P<release>.+)-(?:x86_64|aarch64|arm64|ppc64le|s390x|riscv64|i686)(?:-with-.*)?$")
_UNKNOWN = ("", "n/a", "none", "could not collect", "no cuda", "no hip")


@dataclass(frozen=True)
class Described:
    facts: HostFacts
    origin: str  # what the answer says the set-up came from


def read_set_up(path: Path) -> Described:
    """The machine the file at ``path`` describes, or one line saying why it describes none."""
    name = f"--collect-env {path}"
    try:
        data = read_input(path, limit=4 << 20)
    except InputFileError as exc:
        raise MatrixError(f"{name} is {exc}: {AGAIN}") from None
    text = data.decode("utf-8", errors="replace")
    if text.lstrip().startswith("{"):
        try:
            document = parse(data)
        except MatrixError as exc:
            raise MatrixError(f"{name} cannot be read ({exc}): {AGAIN}") from None
        record = EnvironmentRecord.from_json(document, name, AGAIN)
        return Described(record.host_facts(), f"the environment record {path}, another machine's")
    return Described(collect_env_facts(text, name), f"vLLM's collect-env output {path}, another machine's")


def _known(value: str | None) -> str | None:
    value = (value or "").strip()
    return None if value.lower() in _UNKNOWN else value


def collect_env_facts(text: str, name: str) -> HostFacts:
    """The facts collect-env's ``text`` states; one line (naming ``name``) where it states no Linux kernel."""
    fields: dict[str, str] = {}
    environ: dict[str, str] = {}
    gpus: list[str] = []
    listing = False
    for raw in text.splitlines():
        line = raw.strip()
        gpu = _GPU.match(line)
        if listing and gpu:
            gpus.append(gpu["name"].split(" (UUID")[0].strip())
            continue
        listing = False
        variable = _VARIABLE.match(line)
        if variable:
            environ.setdefault(variable["name"], variable["value"])
            continue
        field = _FIELD.match(line)
        if field:
            key, value = field["key"].strip(), field["value"].strip()
            fields.setdefault(key, value)
            if key == "GPU models and configuration":
                listing = True
                # CUDA's first `GPU n:` line; ROCm's torch device name alone (vLLM's collect_env, get_gpu_info).
                inline = _GPU.match(value)
                named = inline["name"] if inline else _known(value)
                if named:
                    gpus.append(named.split(" (UUID")[0].strip())
    platform = _PLATFORM.match(fields.get("Python platform", ""))
    if platform is None:
        raise MatrixError(f"{name} names no Linux kernel (its `Python platform` line): {AGAIN}")
    cuda, hip = _known(fields.get("CUDA used to build PyTorch")), _known(fields.get("ROCM used to build PyTorch"))
    torch = _known(fields.get("PyTorch version"))
    listed = tuple(Gpu(gpu) for gpu in gpus)
    amd = hip is not None or (cuda is None and any(re.search(r"\bAMD\b|Radeon|Instinct", g) for g in gpus))
    vllm = _known(re.sub(r"\s*\(.*\)$", "", fields.get("vLLM Version", "")))
    return HostFacts(
        uname={"system": "Linux", "release": platform["release"]},
        environ=environ,
        nvidia_gpus=() if amd else listed,
        amd_gpus=listed if amd else (),
        torch={"version": torch, "cuda": cuda, "hip": hip} if torch else None,
        vllm={"version": vllm} if vllm else None,
    )
