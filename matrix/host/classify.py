"""What machine is this, decided from collected facts: host detection and the schema-versioned environment record.

Every decision here is a function of ``HostFacts`` (``matrix.host.facts`` collects them), so
tests can describe a WSL2 or ROCm machine that cannot exist here; the record adds only its
collection time and this Python's version.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import platform
import re
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

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
    "GITHUB_RUN",  # the workflow run that made a night's result, which intake checks
    "GITHUB_JOB",
    "RUNNER_",
)
# A name holding one of these is a secret's name wherever it is in it...
SECRET_MARKERS = ("TOKEN", "KEY", "SECRET", "PASSW", "PASSPHRASE", "CREDENTIAL", "AUTH", "PRIVATE", "COOKIE", "HF_")
# ... and, of a recorded variable, one of these as a whole part of it (PAT: a personal access token; not PATH).
SECRET_PARTS = frozenset({"PAT", "PASS", "PWD"})
REDACTED = "<redacted>"

# Values that are credentials by their shape, whatever the variable is called: the record is a CI artifact.
TOKEN_SHAPES = re.compile(
    r"\b(?:"
    r"gh[pousr]_[A-Za-z0-9]{20,}"  # GitHub tokens
    r"|github_pat_[A-Za-z0-9_]{20,}"
    r"|hf_[A-Za-z0-9]{20,}"  # Hugging Face
    r"|(?:AKIA|ASIA)[A-Z0-9]{16}"  # AWS access key ids
    r"|sk-[A-Za-z0-9_-]{20,}"  # OpenAI-style API keys
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
    r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"  # JWTs
    r")"
)
# Credentials by their place in a value: after an authorisation scheme, a password-like option or a key=.
SECRET_AFTER = re.compile(
    r"(?i)("
    r"\b(?:bearer|basic|token)\s+"
    r"|--?(?:[a-z0-9]+[-_])*(?:password|passwd|pass|passphrase|secret|token|api[-_]?key|auth)(?:=|\s+)"
    r"|\b(?:[a-z0-9]+[-_])*(?:password|passwd|pass|pwd|passphrase|secret|token|api[-_]?key)\s*[=:]\s*"
    r")(?!<redacted>)[^\s&;,'\"]+"
)
# A long run of base64 is a key when its letters change case as often as random ones do (model
# names and paths change case at word starts only). Hex is not: the commits, digests and GPU
# UUIDs that vLLM, torch and CUDA variables hold are hex, and worth keeping.
KEY_RUN = re.compile(r"[A-Za-z0-9+/_-]{32,}={0,2}")
KEY_CASE_CHANGES = 0.3
URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]+")
QUERY_VALUE = re.compile(r"([^&;=]+)=([^&;]*)")
# A person's home: its name is the user's, and everything under it is theirs.
HOME_PATHS = re.compile(r"(?:/home/[^/\s:;]+|/Users/[^/\s:;]+|/root|[A-Za-z]:\\Users\\[^\\\s;]+)(?=[/\\\s:;]|$)")


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

    def to_json(self) -> dict[str, object]:
        """How a plan and a probe record say which host they were made on (``from_json`` reads it back)."""
        return {
            "host": self.host.value,
            "stack": self.stack.value if self.stack else None,
            "kernel": list(self.kernel) if self.kernel else None,
            "gpu": self.gpu,
            "stack_reason": self.stack_reason,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DetectedHost:
        """The host ``to_json`` wrote; KeyError, TypeError or ValueError where it is not one."""
        return cls(
            host=Host.parse(data["host"]),
            stack=Stack.parse(data["stack"]) if data["stack"] else None,
            kernel=tuple(int(part) for part in data["kernel"]) if data["kernel"] else None,
            gpu=str(data["gpu"]),
            stack_reason=str(data["stack_reason"]),
        )


def parse_kernel_version(release: str) -> tuple[int, ...] | None:
    """``5.15.167.4-microsoft-standard-WSL2`` -> (5, 15, 167); None if unparsable."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", release or "")
    if not match:
        return None
    try:
        return tuple(int(x) for x in match.groups(default="0"))
    except ValueError:  # a part past Python's int() limit (4,300 digits) is no version either
        return None


def vllm_in_wsl(uname: dict[str, str]) -> bool:
    """WSL as vLLM's ``in_wsl`` decides it: "microsoft" in any field of the uname, whatever the case. It reads
    nothing else: not WSL's variables, not its interop file."""
    return "microsoft" in " ".join(str(v) for v in uname.values()).lower()


def vllm_kernel_version(release: str) -> tuple[int, ...] | None:
    """The kernel version as vLLM's ``_get_wsl_kernel_version`` reads it (CUDA from 0.24.0, ROCm from 0.28.0):
    ``int()`` of each of the first three dot-separated parts before the first "-", None where one is no int.

    So ``5.15.0rc1-…`` is None (vLLM then takes the old-kernel path), ``5.15-…`` is (5, 15), `` 5.15.1`` is
    (5, 15, 1). The history asks every release's own function the same strings (``vllm_readings`` in the
    kernel-edge tests): a release that reads one otherwise fails there.
    """
    try:
        return tuple(int(part) for part in release.split("-")[0].split(".")[:3])
    except ValueError:
        return None


def wsl_outside_uname(facts: HostFacts) -> bool:
    """The machine says WSL where vLLM does not look: WSL's interop file or its distribution variable."""
    return facts.wsl_interop or "WSL_DISTRO_NAME" in facts.environ


def is_wsl1(release: str) -> bool:
    """WSL1's kernel release (``4.4.0-19041-Microsoft``): Windows' own, capitalised, with no GPU at all."""
    return release.endswith("-Microsoft")


def is_wsl(facts: HostFacts) -> bool:
    """Whether the machine is WSL by any sign, vLLM's or not (the environment record's; cells follow vLLM's)."""
    return vllm_in_wsl(facts.uname) or wsl_outside_uname(facts)


def classify_host(facts: HostFacts) -> Host:
    """The host as vLLM concludes it from the uname, the only thing it reads: a cell is what vLLM does."""
    if not vllm_in_wsl(facts.uname):
        return Host.LINUX
    kernel = vllm_kernel_version(facts.uname.get("release", ""))
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


def _key_like(run: str) -> bool:
    if not all(re.search(kind, run) for kind in ("[A-Z]", "[a-z]", "[0-9]")):
        return False
    pairs = [(a, b) for a, b in zip(run, run[1:]) if a.isalpha() and b.isalpha()]
    return sum(a.isupper() != b.isupper() for a, b in pairs) >= KEY_CASE_CHANGES * len(pairs)


def _redact_url(url: str) -> str:
    """The URL's scheme, host and path; its user, password and every query or fragment value replaced."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return REDACTED
    host = parts.netloc.rpartition("@")[2]
    netloc = f"{REDACTED}@{host}" if "@" in parts.netloc else host
    query = QUERY_VALUE.sub(rf"\1={REDACTED}", parts.query)
    fragment = QUERY_VALUE.sub(rf"\1={REDACTED}", parts.fragment)
    return (
        f"{parts.scheme}://{netloc}{parts.path}"
        + (f"?{query}" if "?" in url else "")
        + (f"#{fragment}" if "#" in url else "")
    )


def scrub(value: str, homes: tuple[str, ...] = ()) -> str:
    """A value fit for a public record: credentials by their shape replaced, a home directory shown as ``~``.

    ``homes`` are this machine's home directories ($HOME and the like), besides the usual places.
    """
    value = URL.sub(lambda m: _redact_url(m.group()), value)
    value = SECRET_AFTER.sub(lambda m: m.group(1) + REDACTED, value)
    value = TOKEN_SHAPES.sub(REDACTED, value)
    value = KEY_RUN.sub(lambda m: REDACTED if _key_like(m.group()) else m.group(), value)
    for home in homes:
        value = re.sub(re.escape(home) + r"(?=[/\\\s:;]|$)", "~", value)
    return HOME_PATHS.sub("~", value)


def homes_of(environ: dict[str, str]) -> tuple[str, ...]:
    """This machine's home directories, as its environment names them; never the root of the file system."""
    found = (environ.get(name, "").rstrip("/\\") for name in ("HOME", "USERPROFILE"))
    return tuple(sorted({home for home in found if len(home) > 3}, key=len, reverse=True))


def redact(environ: dict[str, str]) -> dict[str, str]:
    """The recorded subset of the environment: values of secret-named variables replaced, the rest scrubbed."""
    homes = homes_of(environ)
    kept = {}
    for name in sorted(environ):
        upper = name.upper()
        recorded = upper.startswith(RECORDED_PREFIXES)
        if any(marker in upper for marker in SECRET_MARKERS) or (
            recorded and not SECRET_PARTS.isdisjoint(upper.split("_"))
        ):
            kept[name] = REDACTED
        elif recorded:
            kept[name] = scrub(environ[name], homes)
    return kept


def _scrubbed(value: object, homes: tuple[str, ...]) -> object:
    """Every string in a JSON value scrubbed: tool paths and a failed allocation's message can name a home."""
    if isinstance(value, str):
        return scrub(value, homes)
    if isinstance(value, dict):
        return {key: _scrubbed(item, homes) for key, item in value.items()}
    if isinstance(value, list):
        return [_scrubbed(item, homes) for item in value]
    return value


def environment_record(facts: HostFacts, pinned_allocation: dict | None = None) -> dict:
    """The JSON document ``python -m matrix env`` writes (schema ``ENV_SCHEMA``)."""
    detected = detect(facts)
    body: dict[str, object] = {
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
            "uname_says_microsoft": vllm_in_wsl(facts.uname),
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
    }
    homes = homes_of(facts.environ)
    body = {key: _scrubbed(value, homes) for key, value in body.items()}
    body["environment"] = redact(facts.environ)
    body["env_hash"] = environment_hash(body)
    return {"collected_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), **body}


def environment_hash(record: dict) -> str:
    """A short hash of what was collected, stable across collection times."""
    stable = {k: v for k, v in record.items() if k not in ("collected_at", "env_hash")}
    digest = hashlib.sha256(json.dumps(stable, sort_keys=True).encode()).hexdigest()
    return digest[:16]


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
