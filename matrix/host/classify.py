"""What machine is this, decided from collected facts: host detection and the schema-versioned environment record.

Every decision here is a function of ``HostFacts`` (``matrix.host.facts`` collects them), so
tests can describe a WSL2 or ROCm machine that cannot exist here; the record adds only its
collection time and this Python's version.
"""

from __future__ import annotations

import functools
import json
import platform
import re
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from matrix.cells import WSL2_PIN_KERNEL, Host, Stack

# The doctor decides the host and the stack here on a bare Python, at little more than its start
# (benchmarks/bench_doctor.py): what only the environment record needs (hashlib, datetime, urllib.parse) is
# imported by the functions that make it.

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

# The patterns of what a record leaves out are compiled where they are first used (re keeps them), not when the
# doctor imports this module to read the host: ten of them cost it 2 ms.
# Values that are credentials by their shape, whatever the variable is called: the record is a CI artifact.
TOKEN_SHAPES = (
    r"\b(?:"
    r"gh[pousr]_[A-Za-z0-9]{20,}"  # GitHub tokens
    r"|github_pat_[A-Za-z0-9_]{20,}"
    r"|hf_[A-Za-z0-9]{20,}"  # Hugging Face
    r"|(?:AKIA|ASIA)[A-Z0-9]{16}"  # AWS access key ids
    r"|sk-[A-Za-z0-9_-]{20,}"  # OpenAI-style API keys
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
    r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"  # JWTs
    r"|gl(?:pat|ptt|dt|rt|rtr|cbt|oas|imt|soat|ffct|agent|ft|wt)-[A-Za-z0-9_-]{20,}"  # GitLab
    r"|GR1348941[A-Za-z0-9_-]{20,}"  # GitLab runner registration
    r"|bk[a-z]{2}_[A-Za-z0-9]{20,}"  # Buildkite
    r")"
)
# Credentials by their place in a value: after an authorisation scheme, a password-like option or a key=.
SECRET_AFTER = (
    r"(?i)("
    r"\b(?:bearer|basic|token)\s+"
    r"|--?(?:[a-z0-9]+[-_])*(?:password|passwd|pass|passphrase|secret|token|api[-_]?key|auth)(?:=|\s+)"
    r"|\b(?:[a-z0-9]+[-_])*(?:password|passwd|pass|pwd|passphrase|secret|token|api[-_]?key)\s*[=:]\s*"
    r")(?!<redacted>)[^\s&;,'\"]+"
)
# A long run of base64 is a key when its letters change case as often as random ones do (model
# names and paths change case at word starts only). Hex is not: the commits, digests and GPU
# UUIDs that vLLM, torch and CUDA variables hold are hex, and worth keeping.
KEY_RUN = r"[A-Za-z0-9+/_-]{32,}={0,2}"
KEY_CASE_CHANGES = 0.3
URL = r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]+"
QUERY_VALUE = r"([^&;=]+)=([^&;]*)"
# A person's home: its name is the user's, and everything under it is theirs. Windows' own, seen from WSL
# (/mnt/c/Users/...), and a distribution's, seen from Windows (\\wsl$\<distro>\home\...), are homes too.
HOME_PATHS = (
    r"(?:(?:/mnt/[A-Za-z])?/Users/[^/\s:;]+|/root|[A-Za-z]:\\Users\\[^\\\s;]+"
    r"|(?:[/\\]{2}wsl(?:\$|\.localhost)[/\\][^/\\\s:;]+)?[/\\]home[/\\][^/\\\s:;]+)(?=[/\\\s:;]|$)"
)
# A WSL distribution, named as Windows reaches its files: the user named it.
WSL_SHARE = r"([/\\]{2}wsl(?:\$|\.localhost)[/\\])[^/\\\s:;]+"
EMAIL = r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"
# Addresses of a private network say where a user works; loopback and public ones say nothing of them (and a
# public one is not told from a version: 6.6.87.2 is a kernel).
_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
PRIVATE_IP = (
    rf"(?<![\w.])(?:10(?:\.{_OCTET}){{3}}|(?:172\.(?:1[6-9]|2\d|3[01])|192\.168|100\.(?:6[4-9]|[7-9]\d|1[01]\d|12[0-7])"
    rf"|169\.254)(?:\.{_OCTET}){{2}})(?![\w-]|\.\d)"
    r"|(?i:(?<![\w:.])(?:f[cd][0-9a-f]{2}|fe[89ab][0-9a-f])(?::[0-9a-f]{0,4}){2,7}(?:%[\w.-]+)?(?![\w:]))"
)
# A URL's path segment holding a run as random as a key (a webhook's or a bot's token); not hex, which is a commit.
SEGMENT_RUN = r"[A-Za-z0-9]{16,}"
SEGMENT_CHANGES = 0.3
# A name of the machine or its user is kept out from this length on wherever it is a word, any shorter one only
# where it is a whole part of a path: a user named "ai" must not take "main" or "cuda" with it.
WORD_NAME = 3


# NamedTuples, not dataclasses: the doctor imports this module, and importing dataclasses would cost its start 5 ms.
class Gpu(NamedTuple):
    name: str
    driver: str = ""


class HostFacts(NamedTuple):
    """Everything detection needs, as plain values."""

    # The empty dicts by default (environ, tools) are one each, shared by every HostFacts that leaves them out:
    # they are read, never written.
    uname: dict[str, str]
    environ: dict[str, str] = {}
    wsl_interop: bool = False
    dev_kfd: bool = False
    dev_dxg: bool = False
    nvidia_gpus: tuple[Gpu, ...] = ()
    amd_gpus: tuple[Gpu, ...] = ()
    tools: dict[str, str | None] = {}
    wsl_exe_version: str | None = None
    torch: dict[str, str | None] | None = None
    vllm: dict[str, str | None] | None = None


class DetectedHost(NamedTuple):
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


def _token_segment(segment: str) -> bool:
    """Whether a URL's path segment holds a run of letters and digits that change kind as often as random ones do
    (words, versions and model names change at their parts' starts only); hex never (commits, digests)."""
    for run in re.findall(SEGMENT_RUN, segment):
        if re.fullmatch(r"[0-9a-fA-F]+", run) or not (re.search("[A-Za-z]", run) and re.search("[0-9]", run)):
            continue
        kinds = ["d" if c.isdigit() else "u" if c.isupper() else "l" for c in run]
        if sum(a != b for a, b in zip(kinds, kinds[1:])) >= SEGMENT_CHANGES * (len(run) - 1):
            return True
    return False


def _redact_url(url: str) -> str:
    """The URL's scheme, host and path; its user, password, every query or fragment value and every path segment
    holding a token (a webhook's, a bot's) replaced."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return REDACTED
    host = parts.netloc.rpartition("@")[2]
    netloc = f"{REDACTED}@{host}" if "@" in parts.netloc else host
    path = "/".join(REDACTED if _token_segment(segment) else segment for segment in parts.path.split("/"))
    query = re.sub(QUERY_VALUE, rf"\1={REDACTED}", parts.query)
    fragment = re.sub(QUERY_VALUE, rf"\1={REDACTED}", parts.fragment)
    return (
        f"{parts.scheme}://{netloc}{path}"
        + (f"?{query}" if "?" in url else "")
        + (f"#{fragment}" if "#" in url else "")
    )


class Names(NamedTuple):
    """What names one machine and its user, as the machine itself knows it: none of it is for a public record.

    ``homes`` (longest first) are shown as ``~``; ``hosts``, ``distros`` and ``users`` as ``<host>``,
    ``<distro>`` and ``<user>``.
    """

    homes: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    distros: tuple[str, ...] = ()
    users: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        homes: Iterable[str] = (),
        hosts: Iterable[str] = (),
        distros: Iterable[str] = (),
        users: Iterable[str] = (),
    ) -> Names:
        """The names given, each once, longest first (a name that holds another goes before it); a host's short
        name beside its full one; never the root of a file system, nor what names every machine (localhost)."""

        def kept(found: Iterable[str], shortest: int) -> tuple[str, ...]:
            unique = {name.casefold(): name for name in (n.strip() for n in found) if len(name) >= shortest}
            return tuple(sorted(unique.values(), key=lambda name: (-len(name), name)))

        homes = (home.rstrip("/\\") for home in homes)
        # An address is no name (a private one goes by its shape): its first part would take every such number.
        hosts = [part for host in hosts for part in (host, host.partition(".")[0]) if re.search("[A-Za-z]", part)]
        return cls(
            homes=tuple(sorted({home for home in homes if len(home) > 3}, key=len, reverse=True)),
            hosts=tuple(host for host in kept(hosts, WORD_NAME) if host.casefold() not in ("localhost", "localdomain")),
            distros=kept(distros, WORD_NAME),
            users=kept(users, 2),
        )

    def also(self, other: Names) -> Names:
        """The names of both: a bundle's machine as it knows itself and as its records name it."""
        return Names.of(
            self.homes + other.homes, self.hosts + other.hosts, self.distros + other.distros, self.users + other.users
        )


def names_of(environ: Mapping[str, str], nodes: Iterable[str] = ()) -> Names:
    """The names of the machine whose environment is ``environ`` and whose network names are ``nodes``: its homes
    ($HOME, %USERPROFILE%), its user (their login name and their home's last part) and its WSL distribution."""
    homes = [environ.get(name, "") for name in ("HOME", "USERPROFILE")]
    users = [environ.get(name, "") for name in ("USER", "LOGNAME", "USERNAME")]
    users += [re.split(r"[/\\]", home.rstrip("/\\"))[-1] for home in homes if len(home.rstrip("/\\")) > 3]
    return Names.of(homes, nodes, [environ.get("WSL_DISTRO_NAME", "")], users)


@functools.lru_cache(maxsize=64)
def _literal_names(known: Names) -> re.Pattern[str] | None:
    """One pattern for every name of ``known`` but its homes, each a group named by its placeholder: a host with
    the domain after it, any name as a word (from WORD_NAME letters on), a user's as a whole part of a path."""

    def words(found: tuple[str, ...]) -> str:
        return "|".join(re.escape(name) for name in found if len(name) >= WORD_NAME)

    word_start, word_end = r"(?<![\w.<-])", r"(?![\w-]|\.\w)"
    hosts, distros, users = words(known.hosts), words(known.distros), words(known.users)
    groups = []
    if hosts:
        groups.append(rf"(?P<host>{word_start}(?:{hosts})(?:\.[A-Za-z0-9-]+)*(?![\w-]))")
    if distros:
        groups.append(rf"(?P<distro>{word_start}(?:{distros}){word_end})")
    if known.users:
        as_word = rf"|{word_start}(?:{users}){word_end}" if users else ""
        every = "|".join(map(re.escape, known.users))
        groups.append(rf"(?P<user>(?<=[/\\])(?:{every})(?=[/\\\s:;'\"]|$){as_word})")
    return re.compile("|".join(groups), re.IGNORECASE) if groups else None


# scrub's default: no machine's names, only what goes by its shape.
_NO_NAMES = Names()


def scrub(value: str, known: Names = _NO_NAMES) -> str:
    """A value fit for a public record: credentials, e-mail and private network addresses by their shape replaced,
    a home directory shown as ``~``, a WSL distribution reached from Windows as ``<distro>``; and each of ``known``
    (this machine's names, besides the usual places of a home) replaced by its placeholder."""
    value = re.sub(URL, lambda m: _redact_url(m.group()), value)
    value = re.sub(SECRET_AFTER, lambda m: m.group(1) + REDACTED, value)
    value = re.sub(TOKEN_SHAPES, REDACTED, value)
    value = re.sub(KEY_RUN, lambda m: REDACTED if _key_like(m.group()) else m.group(), value)
    value = re.sub(EMAIL, "<email>", value)
    for home in known.homes:
        value = re.sub(re.escape(home) + r"(?=[/\\\s:;]|$)", "~", value)
    value = re.sub(WSL_SHARE, r"\1<distro>", re.sub(HOME_PATHS, "~", value))
    value = re.sub(PRIVATE_IP, "<ip>", value)
    literal = _literal_names(known)
    return literal.sub(lambda m: f"<{m.lastgroup}>", value) if literal else value


def redact(environ: dict[str, str]) -> dict[str, str]:
    """The recorded subset of the environment: values of secret-named variables replaced, the rest scrubbed."""
    known = Names(homes=names_of(environ).homes)
    kept = {}
    for name in sorted(environ):
        upper = name.upper()
        recorded = upper.startswith(RECORDED_PREFIXES)
        if any(marker in upper for marker in SECRET_MARKERS) or (
            recorded and not SECRET_PARTS.isdisjoint(upper.split("_"))
        ):
            kept[name] = REDACTED
        elif recorded:
            kept[name] = scrub(environ[name], known)
    return kept


def scrubbed(value: object, known: Names) -> object:
    """Every string in a JSON value scrubbed: tool paths and a failed allocation's message can name a home."""
    if isinstance(value, str):
        return scrub(value, known)
    if isinstance(value, dict):
        return {key: scrubbed(item, known) for key, item in value.items()}
    if isinstance(value, list):
        return [scrubbed(item, known) for item in value]
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
            "devices": [g._asdict() for g in facts.nvidia_gpus + facts.amd_gpus],
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
    # Its homes only: the record names its machine, for the kit's own runners; a bundle takes the rest out.
    homes = Names(homes=names_of(facts.environ).homes)
    body = {key: scrubbed(value, homes) for key, value in body.items()}
    body["environment"] = redact(facts.environ)
    body["env_hash"] = environment_hash(body)
    import datetime as dt

    return {"collected_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), **body}


def environment_hash(record: dict) -> str:
    """A short hash of what was collected, stable across collection times."""
    import hashlib

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
