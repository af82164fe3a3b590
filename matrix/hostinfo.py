"""What machine is this? Host detection and the schema-versioned environment record.

Collection (``collect_facts``) touches the system: uname, /proc, /dev, a few
commands, package metadata. Everything after it is a pure function over the
collected ``HostFacts``, so tests can describe a WSL2 or ROCm machine that
cannot exist here. Neither torch nor vLLM is imported: their versions and
builds are read from package metadata and ``torch/version.py``.
"""

from __future__ import annotations

import ast
import datetime as dt
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

from matrix.cells import WSL2_PIN_KERNEL, Host, Stack

ENV_SCHEMA = "wslpin-kit.env/1"

# Environment variables worth recording: they steer vLLM, torch or the GPU stack.
RECORDED_PREFIXES = (
    "VLLM_",
    "CUDA_",
    "HIP_",
    "ROCM_",
    "HSA_",
    "NVIDIA_",
    "PYTORCH_",
    "TORCH_",
    "WSL",
    "HF_",
    "GITHUB_RUN",
    "RUNNER_",
)
SECRET_MARKERS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH", "HF_")
REDACTED = "<redacted>"

# WSL keeps the Windows-side tools here; they are not always on PATH.
WSL_LIB = "/usr/lib/wsl/lib"


@dataclass(frozen=True)
class Gpu:
    name: str
    driver: str = ""


@dataclass(frozen=True)
class HostFacts:
    """Everything detection needs, as plain values."""

    uname: dict[str, str]
    environ: dict[str, str] = field(default_factory=dict)
    wsl_interop: bool = False
    dev_kfd: bool = False
    dev_dxg: bool = False
    nvidia_gpus: tuple[Gpu, ...] = ()
    amd_gpus: tuple[Gpu, ...] = ()
    tools: dict[str, str | None] = field(default_factory=dict)
    wsl_exe_version: str | None = None
    torch: dict[str, str | None] | None = None
    vllm: dict[str, str | None] | None = None


@dataclass(frozen=True)
class DetectedHost:
    """This machine as the matrix sees it."""

    host: Host
    stack: Stack | None  # None: no usable GPU
    kernel: tuple[int, ...] | None
    gpu: str
    stack_reason: str


def parse_kernel_version(release: str) -> tuple[int, ...] | None:
    """``5.15.167.4-microsoft-standard-WSL2`` -> (5, 15, 167); None if unparsable."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", release or "")
    if not match:
        return None
    return tuple(int(x) for x in match.groups(default="0"))


def is_wsl(facts: HostFacts) -> bool:
    text = " ".join(str(v) for v in facts.uname.values()).lower()
    return "microsoft" in text or facts.wsl_interop or "WSL_DISTRO_NAME" in facts.environ


def classify_host(facts: HostFacts) -> Host:
    if not is_wsl(facts):
        return Host.LINUX
    kernel = parse_kernel_version(facts.uname.get("release", ""))
    if kernel is None or kernel < WSL2_PIN_KERNEL:
        return Host.WSL2OLD
    return Host.WSL2NEW


def classify_stack(facts: HostFacts) -> tuple[Stack | None, str]:
    """Which GPU stack this machine can really run, and the evidence."""
    if facts.nvidia_gpus:
        return Stack.CUDA, f"nvidia-smi lists {len(facts.nvidia_gpus)} GPU(s)"
    if facts.amd_gpus:
        return Stack.ROCM, f"amd-smi/rocm-smi lists {len(facts.amd_gpus)} GPU(s)"
    if facts.dev_kfd:
        return Stack.ROCM, "/dev/kfd present"
    hip = (facts.torch or {}).get("hip")
    if facts.dev_dxg and hip:
        return Stack.ROCM, f"/dev/dxg present and torch is a HIP {hip} build"
    evidence = []
    if facts.dev_dxg:
        evidence.append("/dev/dxg present but no GPU listed by nvidia-smi or amd-smi")
    return None, "no GPU: " + ("; ".join(evidence) or "no nvidia-smi/amd-smi GPU, no /dev/kfd")


def detect(facts: HostFacts) -> DetectedHost:
    stack, reason = classify_stack(facts)
    gpus = facts.nvidia_gpus or facts.amd_gpus
    return DetectedHost(
        host=classify_host(facts),
        stack=stack,
        kernel=parse_kernel_version(facts.uname.get("release", "")),
        gpu=gpus[0].name if gpus else "",
        stack_reason=reason,
    )


def detected_from_record(record: dict) -> DetectedHost:
    """The DetectedHost stored in an environment record (see ``environment_record``)."""
    host = record.get("host", {})
    kernel = record.get("kernel", {}).get("version")
    devices = record.get("gpu", {}).get("devices") or [{}]
    return DetectedHost(
        host=Host.parse(host.get("detected", "")),
        stack=Stack.parse(host["stack"]) if host.get("stack") else None,
        kernel=tuple(kernel) if kernel else None,
        gpu=devices[0].get("name", ""),
        stack_reason=host.get("stack_reason", ""),
    )


def redact(environ: dict[str, str]) -> dict[str, str]:
    """The recorded subset of the environment, secret-looking values replaced."""
    kept = {}
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(RECORDED_PREFIXES) and not any(m in upper for m in SECRET_MARKERS):
            continue
        secret = any(marker in upper for marker in SECRET_MARKERS)
        kept[name] = REDACTED if secret else environ[name]
    return kept


def environment_record(facts: HostFacts, pinned_allocation: dict | None = None) -> dict:
    """The JSON document ``python -m matrix env`` writes (schema ``ENV_SCHEMA``)."""
    detected = detect(facts)
    body = {
        "schema": ENV_SCHEMA,
        "host": {
            "detected": detected.host.value,
            "stack": detected.stack.value if detected.stack else None,
            "stack_reason": detected.stack_reason,
        },
        "uname": dict(facts.uname),
        "kernel": {
            "release": facts.uname.get("release", ""),
            "version": list(detected.kernel) if detected.kernel else None,
        },
        "wsl": {
            "is_wsl": is_wsl(facts),
            "uname_says_microsoft": "microsoft" in " ".join(facts.uname.values()).lower(),
            "interop": facts.wsl_interop,
            "distro": facts.environ.get("WSL_DISTRO_NAME"),
            "wsl_exe_version": facts.wsl_exe_version,
        },
        "gpu": {
            "devices": [asdict(g) for g in facts.nvidia_gpus + facts.amd_gpus],
            "dev_kfd": facts.dev_kfd,
            "dev_dxg": facts.dev_dxg,
            "tools": dict(facts.tools),
            "pinned_allocation": pinned_allocation,
        },
        "packages": {
            "torch": facts.torch,
            "vllm": facts.vllm,
            "torch_mismatch": torch_mismatch(facts.torch, facts.vllm),
        },
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation()},
        "environment": redact(facts.environ),
    }
    body["env_hash"] = environment_hash(body)
    return {"collected_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), **body}


def environment_hash(record: dict) -> str:
    """A short hash of what was collected, stable across collection times."""
    stable = {k: v for k, v in record.items() if k not in ("collected_at", "env_hash")}
    digest = hashlib.sha256(json.dumps(stable, sort_keys=True).encode()).hexdigest()
    return digest[:16]


# --- collection: the only part that touches the machine -----------------------------


def _run(argv: list[str], timeout: float = 15) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    raw = done.stdout
    # wsl.exe writes UTF-16LE to a pipe.
    if b"\x00" in raw:
        return raw.decode("utf-16-le", errors="replace").replace("\x00", "").strip()
    return raw.decode(errors="replace").strip()


def _which(name: str) -> str | None:
    found = shutil.which(name)
    if found is None and os.path.exists(os.path.join(WSL_LIB, name)):
        found = os.path.join(WSL_LIB, name)
    return found


def _nvidia_gpus(nvidia_smi: str | None) -> tuple[Gpu, ...]:
    if not nvidia_smi:
        return ()
    out = _run([nvidia_smi, "--query-gpu=name,driver_version", "--format=csv,noheader"])
    gpus = []
    for line in (out or "").splitlines():
        name, _, driver = line.partition(",")
        if name.strip():
            gpus.append(Gpu(name.strip(), driver.strip()))
    return tuple(gpus)


def _amd_gpus(amd_smi: str | None, rocm_smi: str | None) -> tuple[Gpu, ...]:
    if amd_smi:
        out = _run([amd_smi, "static", "--asic", "--driver", "--json"])
        try:
            data = json.loads(out or "")
        except json.JSONDecodeError:
            data = []
        gpus = []
        for entry in data if isinstance(data, list) else []:
            asic = entry.get("asic", {}) if isinstance(entry, dict) else {}
            driver = entry.get("driver", {}) if isinstance(entry, dict) else {}
            gpus.append(Gpu(str(asic.get("market_name", "AMD GPU")), str(driver.get("version", ""))))
        if gpus:
            return tuple(gpus)
    if rocm_smi:
        out = _run([rocm_smi, "--showproductname", "--csv"])
        lines = [line for line in (out or "").splitlines()[1:] if line.strip()]
        return tuple(Gpu(line.split(",")[1] if "," in line else line) for line in lines)
    return ()


def torch_info() -> dict[str, str | None] | None:
    """torch's version and build, read from its files without importing it."""
    try:
        dist = metadata.distribution("torch")
    except metadata.PackageNotFoundError:
        return None
    info: dict[str, str | None] = {"version": dist.version, "cuda": None, "hip": None, "git_version": None}
    try:
        tree = ast.parse(dist.locate_file("torch/version.py").read_text())
    except (OSError, SyntaxError):
        return info
    for node in tree.body:
        target = getattr(node, "target", None) or (getattr(node, "targets", None) or [None])[0]
        if isinstance(target, ast.Name) and target.id in ("cuda", "hip", "git_version"):
            value = getattr(node, "value", None)
            if isinstance(value, ast.Constant):
                info[target.id] = value.value
    return info


def vllm_info() -> dict[str, str | None] | None:
    try:
        dist = metadata.distribution("vllm")
    except metadata.PackageNotFoundError:
        return None
    commit = None
    try:
        text = dist.locate_file("vllm/_version.py").read_text()
        match = re.search(r"commit_id\s*=\s*['\"]([^'\"]+)['\"]", text)
        commit = match.group(1) if match else None
    except OSError:
        pass
    return {"version": dist.version, "commit": commit, "requires_torch": _torch_requirement(dist.requires or [])}


def _torch_requirement(requires: list[str]) -> str | None:
    """The torch specifier in vLLM's own metadata (e.g. ``==2.14.0``), ignoring extras' requirements."""
    for line in requires:
        match = re.match(r"torch(?:\s*\[[^\]]*\])?\s*(?P<spec>[<>=!~][^;]*)?(?:;(?P<marker>.*))?$", line.strip())
        if match and "extra" not in (match.group("marker") or ""):
            return (match.group("spec") or "").strip() or None
    return None


def torch_mismatch(torch: dict | None, vllm: dict | None) -> bool | None:
    """Whether the installed torch falls outside the one vLLM's metadata asks for; None when unknown.

    The gate installs a CPU torch that may differ from the release's pin (a GPU-less
    machine cannot have the CUDA build it names); results must say so.
    """
    spec = (vllm or {}).get("requires_torch")
    if not spec or not torch or not torch.get("version"):
        return None
    # Imported here, not at the top: `python -m matrix plan` must run on a bare python3.
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        installed = Version(Version(torch["version"]).public)
        return installed not in SpecifierSet(spec, prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return None


def collect_facts() -> HostFacts:
    uname = platform.uname()
    tools = {name: _which(name) for name in ("nvidia-smi", "amd-smi", "rocm-smi", "wsl.exe")}
    return HostFacts(
        uname={
            "system": uname.system,
            "node": uname.node,
            "release": uname.release,
            "version": uname.version,
            "machine": uname.machine,
        },
        environ=dict(os.environ),
        wsl_interop=os.path.exists("/proc/sys/fs/binfmt_misc/WSLInterop"),
        dev_kfd=os.path.exists("/dev/kfd"),
        dev_dxg=os.path.exists("/dev/dxg"),
        nvidia_gpus=_nvidia_gpus(tools["nvidia-smi"]),
        amd_gpus=_amd_gpus(tools["amd-smi"], tools["rocm-smi"]),
        tools=tools,
        wsl_exe_version=_run([tools["wsl.exe"], "--version"]) if tools["wsl.exe"] else None,
        torch=torch_info(),
        vllm=vllm_info(),
    )


_PIN_CHECK = (
    "import torch\n"
    "t = torch.empty(1 << 20, dtype=torch.uint8, pin_memory=True)\n"
    "print('pinned' if t.is_pinned() else 'not pinned')\n"
)


def check_pinned_allocation(python: str = sys.executable) -> dict:
    """Try a 1 MiB pinned allocation with torch, in a child process (never imported here)."""
    try:
        done = subprocess.run([python, "-c", _PIN_CHECK], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return {"ok": False, "detail": "timed out after 120 s"}
    if done.returncode == 0:
        return {"ok": done.stdout.strip() == "pinned", "detail": done.stdout.strip()}
    last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return {"ok": False, "detail": last}


def collect_environment() -> dict:
    facts = collect_facts()
    pinned = None
    if detect(facts).stack is not None and facts.torch is not None:
        pinned = check_pinned_allocation()
    return environment_record(facts, pinned)


def kit_commit() -> str:
    """The kit's git commit (short), marked +dirty when tracked files changed; results name it."""

    def git(*argv: str) -> str:
        root = Path(__file__).resolve().parent.parent
        done = subprocess.run(["git", "-C", str(root), *argv], capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short=12", "HEAD")
    if not commit:
        return "unknown"
    return commit + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def runner_name() -> str:
    """The CI runner's name where there is one, else this machine's."""
    return os.environ.get("RUNNER_NAME") or platform.node()
