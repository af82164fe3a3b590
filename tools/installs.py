"""How noxfile.py's sessions install vLLM, torch and the kit, so that each session stays a few lines.

A session's venv gets one of three installs (``install``), by what ``--vllm`` names and what this machine is:

* ``--vllm installed``: nothing; the Python nox runs in (``nox --no-venv``) already has vLLM and torch;
* a GPU for the session's cells (``full``): vLLM with its own dependencies, torch's CUDA or ROCm build among them;
* no GPU for them (a laptop, CI, every history release): vLLM's wheel alone (``--no-deps``), the gate lock
  (requirements/gate.txt) and ``GATE_TORCH``. vLLM's gate code imports torch but never runs a kernel, so that
  is torch's CPU build (``cpu_torch``), never the CUDA build the package index serves on Linux (several GB of
  NVIDIA libraries, nothing of which the gate loads).

Then the kit itself, editable, with its test extra. A vLLM source checkout is its release installed so, with the
checkout's files laid over it (``lay_over``). Each history release gets a venv of its own (``release_python``),
installed into with uv (or that Python's pip) from outside it.

Standard library and nox only: the noxfile imports this before any venv exists (from the kit's root, which it
puts first on ``sys.path``, so ``nox -f path/to/noxfile.py`` from anywhere finds it).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import nox
from nox.command import CommandFailed
from nox.virtualenv import PassthroughEnv

from matrix import variables
from matrix.commands import vllm_source
from matrix.errors import MatrixError

# vLLM's gate code needs torch, never a GPU: a CPU build is enough (see requirements/gate.in).
GATE_TORCH = "torch==2.13.0"
GATE_LOCK = "requirements/gate.txt"
# `--vllm installed`: the vLLM and torch already in the Python that runs the session (a runner with vLLM
# preinstalled, an offline machine); the session installs nothing, so it needs `nox --no-venv`.
INSTALLED = "installed"
TORCH_INDEX = variables.TORCH_INDEX.name

# uv writes no bytecode when it installs, and compiling a whole environment at install (~17,000 files with torch and
# vLLM) costs more than Python compiling the few thousand modules a run imports, once, as it first imports them:
# `nox -s gate` from a new venv took 60 s that way against 71 s compiled at install (vLLM 0.33.0, 2 cores).
# That holds only where Python may write what it compiles: with PYTHONDONTWRITEBYTECODE set (in many containers and
# on CI machines, this kit's among them) every process and forked child would compile torch and vLLM again (a
# release's gate tests took 116 s that way against 50 s). A session's venv is its own, so what it runs may write.
DONT_WRITE_BYTECODE = "PYTHONDONTWRITEBYTECODE"


@dataclass(frozen=True)
class TorchSource:
    """Where an install of torch takes its CPU build from: the installer's options, and the line that says so."""

    options: tuple[str, ...]
    said: str
    cpu: bool = True  # False: nothing here makes the build a CPU one (pip without a wheel directory or mirror)


# uv's own way to PyTorch's CPU index; where that index cannot be reached, the package index's torch instead.
BACKEND = ("--torch-backend", "cpu")
UNREACHABLE = (
    "PyTorch's CPU index cannot be reached from here: torch from the package index instead, CUDA's build on Linux "
    f"(several GB); set {TORCH_INDEX} to a mirror of that index, or UV_FIND_LINKS to a directory holding its CPU wheel"
)


def cpu_torch(environ: Mapping[str, str], uv: bool) -> TorchSource:
    """The options that make an install of ``torch`` take its CPU build, the first of these that applies:

    1. a wheel directory (or flat page) the installer is pointed at, ``UV_FIND_LINKS`` for uv and ``PIP_FIND_LINKS``
       for pip: the installer reads it itself and takes the CPU wheel kept there (offline; this is how a machine
       that cannot reach PyTorch's index, this kit's CI among them, keeps working);
    2. ``WSLPIN_TORCH_INDEX``, a mirror of PyTorch's CPU index: searched before the package index (uv's first
       index that has torch wins; pip takes the highest version, and ``2.13.0+cpu`` is above ``2.13.0``);
    3. ``UV_TORCH_BACKEND``, set by the user: uv reads it itself (``cu128``, say, for a CUDA torch after all);
    4. with uv, ``--torch-backend cpu``: uv takes torch from PyTorch's CPU index, whose address uv knows.

    Only pip with none of the first two is left with the package index's torch, which is CUDA's on Linux.
    """
    links = environ.get("UV_FIND_LINKS" if uv else "PIP_FIND_LINKS")
    if links:
        return TorchSource((), f"torch's CPU build from the wheels {'UV' if uv else 'PIP'}_FIND_LINKS names ({links})")
    mirror = environ.get(TORCH_INDEX)
    if mirror:
        return TorchSource(("--index" if uv else "--extra-index-url", mirror), f"torch from {TORCH_INDEX} ({mirror})")
    if uv and environ.get("UV_TORCH_BACKEND"):
        return TorchSource((), f"torch's {environ['UV_TORCH_BACKEND']} build (UV_TORCH_BACKEND)")
    if uv:
        return TorchSource(("--torch-backend", "cpu"), "torch's CPU build from PyTorch's CPU index (uv's backend)")
    return TorchSource(
        (),
        f"torch from the package index, CUDA's build on Linux (several GB): without uv, set {TORCH_INDEX} to a mirror "
        "of PyTorch's CPU index or PIP_FIND_LINKS to a directory holding its CPU wheel",
        cpu=False,
    )


@dataclass(frozen=True)
class Installer:
    """An install into one environment: ``run(*args)`` is ``pip install ARGS`` there; ``uv``: uv's pip does it."""

    run: Callable[..., object]
    uv: bool

    def __call__(self, *args: str) -> object:
        return self.run(*args)


def installer(session: nox.Session, python: str | None = None) -> Installer:
    """``session.install``, or the same into another interpreter's environment; what the session runs from then on
    writes its bytecode (``DONT_WRITE_BYTECODE`` cleared)."""
    session.env[DONT_WRITE_BYTECODE] = None
    if python is None:
        return Installer(session.install, session.venv_backend == "uv")
    if shutil.which("uv"):
        return Installer(
            lambda *args: session.run("uv", "pip", "install", "--quiet", "--python", python, *args, external=True),
            uv=True,
        )
    return Installer(
        lambda *args: session.run(python, "-m", "pip", "install", "--quiet", *args, external=True), uv=False
    )


def install_torch(session: nox.Session, install: Installer, *requirements: str) -> None:
    """``requirements`` (torch, or what pins it) with torch's CPU build, saying where it comes from."""
    source = cpu_torch(os.environ, install.uv)
    (session.log if source.cpu else session.warn)(source.said)
    try:
        install(*source.options, *requirements)
    except CommandFailed:
        if source.options != BACKEND:
            raise
        # A network that lets the package index through but not PyTorch's (a firewall, a proxy that knows one
        # registry): the session still runs, with the build the package index has.
        session.warn(UNREACHABLE)
        install(*requirements)


def install(session: nox.Session, vllm: str, full: bool, python: str | None = None) -> None:
    """vLLM and the kit; nothing for ``--vllm installed``, whose Python has both already."""
    without_venv = isinstance(session.virtualenv, PassthroughEnv)  # what `nox --no-venv` gives a session
    if vllm == INSTALLED:
        if not without_venv:
            session.error(
                f"--vllm {INSTALLED} runs against the vLLM of the Python nox runs in, which a session's venv "
                f"does not have: run `nox --no-venv -s '{session.name}' -- --vllm {INSTALLED}` from that environment"
            )
        return
    if without_venv and python is None:
        session.error(
            f"with --no-venv this session installs nothing: add `-- --vllm {INSTALLED}` to run against "
            "this Python's own vLLM and torch, or drop --no-venv to install vLLM into a venv"
        )
    into = installer(session, python)
    install_vllm(session, into, vllm, full)
    into("-e", ".[test]")


def install_vllm(session: nox.Session, install: Installer, vllm: str, full: bool) -> None:
    """vLLM. Without a GPU for the cells: vLLM's wheel alone plus what its gate code imports, torch's CPU build."""
    wanted = vllm if vllm.endswith(".whl") else f"vllm=={vllm}"
    if full:
        requirement = [wanted]
    else:
        install("--no-deps", "-r", GATE_LOCK)
        install_torch(session, install, GATE_TORCH)
        requirement = ["--no-deps", wanted]
    try:
        install(*requirement)
    except nox.command.CommandFailed:
        session.error(f"could not install vLLM {vllm} (see the installer's message above): is it a released version?")


def source_tree(session: nox.Session, vllm: str) -> vllm_source.SourceTree | None:
    """The checkout ``--vllm`` names, placed by git after its release; None for a release, a wheel, ``installed``."""
    if not Path(vllm).is_dir():
        return None
    try:
        return vllm_source.describe(Path(vllm))
    except MatrixError as exc:
        session.error(f"--vllm: {exc}")


def install_chosen(session: nox.Session, vllm: str, full: bool) -> None:
    """What ``--vllm`` names: a release or wheel as it is; a checkout as its release with the checkout laid over."""
    tree = source_tree(session, vllm)
    install(session, tree.release if tree else vllm, full=full)
    if tree is not None:
        lay_over(session, tree, Path(session.create_tmp()))


def lay_over(session: nox.Session, tree: vllm_source.SourceTree, tmp: Path) -> None:
    """The checkout over the release just installed (``matrix.commands.vllm_source``), first on every process's path."""
    layer = tmp / "vllm-source"
    session.run("python", "-m", "matrix", "vllm-layer", str(tree.path), "--out", str(layer))
    session.env["PYTHONPATH"] = vllm_source.python_path(layer, os.environ.get("PYTHONPATH"))


def release_python(session: nox.Session, version: str) -> str:
    """A virtual environment of its own for one vLLM release, kept beside the sessions' (history's and publish's)."""
    env = Path(session.virtualenv.location).parent / "releases" / version
    if not (env / "bin" / "python").exists():
        if shutil.which("uv"):
            session.run("uv", "venv", "--quiet", "--python", sys.executable, str(env), external=True)
        else:
            session.run(sys.executable, "-m", "venv", str(env), external=True)
    return str(env / "bin" / "python")


def uninstall(session: nox.Session, *packages: str) -> None:
    """Remove packages from the session's environment, with the installer that made it."""
    if session.venv_backend == "uv":
        session.run("uv", "pip", "uninstall", *packages, external=True)
    else:
        session.run("python", "-m", "pip", "uninstall", "--yes", *packages)
