"""Collecting what detection needs from this machine: uname, /proc, /dev, a few commands, package metadata.

This is the only part of host detection that touches the system; ``matrix.host.classify``
decides from what it returns. Neither torch nor vLLM is imported: their versions and
builds are read from package metadata and ``torch/version.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from matrix.host import reads
from matrix.host.classify import Gpu, HostFacts, Names, detect, environment_record, names_of

# The doctor reads this machine through collect_facts on a bare Python, and costs little more than its start
# (benchmarks/bench_doctor.py): what only a tool that is there needs (subprocess, selectors), and what only other
# commands need (socket, ast), is imported where it is used; package metadata is read without importlib.metadata.

# WSL keeps the Windows-side tools here; they are not always on PATH.
WSL_LIB = "/usr/lib/wsl/lib"


# A GPU tool answers in a second or two, in a few KiB; one that does neither is a broken (or hostile) tool on
# PATH, and the doctor, the record and the plan must still end, in bounded memory.
TOOL_TIMEOUT = 10.0
TOOL_OUTPUT_LIMIT = 1 << 20


def _run(argv: list[str], timeout: float = TOOL_TIMEOUT, limit: int = TOOL_OUTPUT_LIMIT) -> str | None:
    """A tool's output, or None where it failed, hung past ``timeout`` or wrote more than ``limit`` bytes.

    It runs in a process group of its own, killed whole when it is given up on: a tool that leaves a child
    holding its output would otherwise keep the reader waiting, and the child running.
    """
    import selectors
    import signal
    import subprocess

    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return None
    chunks, size, ended = [], 0, False
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    with proc.stdout, selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while size <= limit and time.monotonic() < deadline:
            if not selector.select(max(0.0, deadline - time.monotonic())):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                ended = True
                break
            chunks.append(chunk)
            size += len(chunk)
    if not ended:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    try:
        code = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None
    if not ended or code != 0:
        return None
    raw = b"".join(chunks)
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
            # amd-smi writes "N/A" where a section has nothing to say: anything but an object is no facts.
            asic = entry.get("asic") if isinstance(entry, dict) else None
            driver = entry.get("driver") if isinstance(entry, dict) else None
            asic = asic if isinstance(asic, dict) else {}
            driver = driver if isinstance(driver, dict) else {}
            gpus.append(Gpu(str(asic.get("market_name", "AMD GPU")), str(driver.get("version", ""))))
        if gpus:
            return tuple(gpus)
    if rocm_smi:
        out = _run([rocm_smi, "--showproductname", "--csv"])
        lines = [line for line in (out or "").splitlines()[1:] if line.strip()]
        return tuple(Gpu(line.split(",")[1] if "," in line else line) for line in lines)
    return ()


# A NamedTuple, not a dataclass: the doctor imports this module, and importing dataclasses would cost its start 5 ms.
class Installed(NamedTuple):
    """A distribution installed where this Python finds it: its metadata folder (``*.dist-info``, ``*.egg-info``)."""

    folder: Path
    version: str | None  # its metadata's Version; None where it has none
    requires: tuple[str, ...]  # its Requires-Dist lines

    def read_text(self, name: str) -> str | None:
        """The folder's file ``name``; None where it cannot be read."""
        try:
            return (self.folder / name).read_text(encoding="utf-8")
        except OSError:
            return None

    def locate_file(self, name: str) -> Path:
        """A file of the distribution, relative to the folder its metadata folder is in (site-packages)."""
        return self.folder.parent / name


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower().replace("-", "_")


def installed(name: str, path: Sequence[str] | None = None) -> Installed | None:
    """The distribution ``name`` that importlib.metadata.distribution would give, or None where none is installed.

    Read without importing importlib.metadata, which brings email, zipfile and csv: a third of the doctor's own
    start. The same search as its path finder: each entry of ``path`` (sys.path) in turn, the first folder in it
    named ``<name>-<version>.dist-info`` or ``.egg-info`` (the name as packaging normalizes it), its METADATA (or
    PKG-INFO) read for Version and Requires-Dist. Zipped eggs, which no installer of vLLM or torch writes, are not
    searched. tests/kit/test_installed.py holds it equal to importlib.metadata for every package installed there.
    """
    wanted = _normalized(name)
    for entry in sys.path if path is None else path:
        try:
            children = os.listdir(entry or ".")
        except OSError:
            continue
        for child in children:
            low = child.lower()
            if (
                low.endswith((".dist-info", ".egg-info"))
                and _normalized(low.rpartition(".")[0].partition("-")[0]) == wanted
            ):
                return _installed(Path(entry or ".", child))
    return None


def _installed(folder: Path) -> Installed:
    found = Installed(folder, None, ())
    text = found.read_text("METADATA") or found.read_text("PKG-INFO") or ""
    version, requires = None, []
    # Its headers, up to the first empty line (the description follows): the first Version, every Requires-Dist.
    # A line that starts with white space continues the header before it (a License's paragraphs).
    for line in text.splitlines():
        if not line:
            break
        if line[0] in " \t":
            continue
        key, _, value = line.partition(":")
        if key.lower() == "version" and version is None:
            version = value.strip()
        elif key.lower() == "requires-dist":
            requires.append(value.strip())
    return Installed(folder, version, tuple(requires))


def torch_info() -> dict[str, str | None] | None:
    """torch's version and build, read from its files without importing it."""
    import ast

    dist = installed("torch")
    if dist is None:
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
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                info[target.id] = value.value
    return info


def vllm_info() -> dict[str, str | None] | None:
    dist = installed("vllm")
    if dist is None:
        return None
    commit = None
    try:
        text = dist.locate_file("vllm/_version.py").read_text()
        match = re.search(r"commit_id\s*=\s*['\"]([^'\"]+)['\"]", text)
        commit = match.group(1) if match else None
    except OSError:
        pass
    return {
        "version": dist.version,
        "commit": commit,
        "requires_torch": _torch_requirement(list(dist.requires)),
        "source": _direct_url(dist),
    }


def _direct_url(dist: Installed) -> str | None:
    """Where a vLLM not installed from an index came from (a wheel file, a source checkout), as PEP 610 records it."""
    try:
        url = json.loads(dist.read_text("direct_url.json") or "null")
    except ValueError:
        return None
    return url.get("url") if isinstance(url, dict) and isinstance(url.get("url"), str) else None


def _torch_requirement(requires: list[str]) -> str | None:
    """The torch specifier in vLLM's own metadata (e.g. ``==2.14.0``), ignoring extras' requirements."""
    for line in requires:
        match = re.match(r"torch(?:\s*\[[^\]]*\])?\s*(?P<spec>[<>=!~][^;]*)?(?:;(?P<marker>.*))?$", line.strip())
        if match and "extra" not in (match.group("marker") or ""):
            return (match.group("spec") or "").strip() or None
    return None


def collect_facts() -> HostFacts:
    reads.record("collect_facts: uname, environment, /proc, /dev, GPU and WSL tools, torch and vLLM metadata")
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
    import subprocess

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


# What `nox -s publish` writes: the kit's outputs, not its code, so rewriting them leaves the commit clean.
PUBLISHED_OUTPUTS = ("docs/matrix", "docs/evidence", "matrix/doctor/matrix.json")


def kit_commit() -> str:
    """The kit's git commit (short), marked +dirty when tracked files changed; results name it."""

    import subprocess

    def git(*argv: str) -> str:
        root = Path(__file__).resolve().parents[2]
        done = subprocess.run(["git", "-C", str(root), *argv], capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short=12", "HEAD")
    if not commit:
        return "unknown"
    outputs = [f":(exclude){path}" for path in PUBLISHED_OUTPUTS]
    return commit + ("+dirty" if git("status", "--porcelain", "--untracked-files=no", "--", ".", *outputs) else "")


def runner_name() -> str:
    """The CI runner's name where there is one, else this machine's."""
    if os.environ.get("RUNNER_NAME"):
        return os.environ["RUNNER_NAME"]
    reads.record("runner_name: the node name")
    return platform.node()


def names_here() -> Names:
    """What names this machine and its user (``matrix.host.classify.Names``): its environment, its node name and
    its fully qualified one. None of it is for what a user sends the kit."""
    reads.record("names_here: the environment, the node name and the fully qualified domain name")
    import socket

    return names_of(os.environ, (platform.node(), socket.getfqdn()))
