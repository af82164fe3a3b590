"""vLLM's answers from isolated children, remembered for the kit's own test session.

The kit's tests ask the installed vLLM the same questions many times over: in-process, and through
every ``pytest tests/cell`` and nox session they start, each evaluation a child that imports vLLM
(~5 s). Where ``WSLPIN_ANSWER_CACHE`` names a directory (the kit's test session sets it, for every
process it starts), an evaluation whose key is already there returns the answer the first one got;
the key holds everything an answer depends on: the question, the installed vLLM (its files' hashes),
torch, transformers, every other distribution's name and version, the interpreter, the kit's own
code, the uname and the environment variables vLLM or the stand-ins read. A path in any of them is
named by its place (the venv, the kit, a CI runner's directories), so the same installation in
another place finds the answers: `nox -s act`'s nights keep one directory, and each night's gate job,
in a workspace and venv of its own, reads what the first night's asked. Without the variable nothing
is remembered: a cell session, the history and the offline GPU run always ask vLLM afresh.

Only answers are kept (a child that returned, or raised inside the kit's probe): a child that hung
or died is asked again, and a remembered answer is given only where it came within the time the
caller allows now (its timeout, or what is left before the run's deadline).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pickle
import platform
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from matrix.variables import ANSWER_CACHE, PRESENT_HOST
from repro.isolation import Outcome, run_isolated, time_left

CACHE_VARIABLE = ANSWER_CACHE.name
_KIT = Path(__file__).resolve().parents[1]
# What a child's answer can depend on in its environment: vLLM's and the GPU stacks' own variables, WSL's,
# the kit's presented host, and where programs and modules are found (a stand-in nvidia-smi, a fake vLLM).
# Not the kit's own bookkeeping (the test being run, the run's deadline): it changes nothing a child sees.
_ENV_PREFIXES = ("VLLM_", "CUDA_", "HIP_", "ROCR_", "ROCM_", "HSA_", "NVIDIA_", "TORCH", "PYTORCH_", "TRITON_", "WSL_")
_ENV_NAMES = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "LD_PRELOAD", PRESENT_HOST.name)
# The compile cache that importing torch._inductor points at its per-user default: it differs only by
# whether the parent has preloaded torch yet.
_ENV_IGNORED = ("TORCHINDUCTOR_CACHE_DIR",)
_KEPT = ("ok", "error")
# Where a run is placed: its venv, the kit's checkout and, in a CI job, the runner's own directories. The key names a
# path under one of them by that place, so that the same installation, asked under the same environment from another
# checkout or another CI job, finds what the first kept: each of `nox -s act`'s nights runs its gate job in a
# workspace, a venv and a runner directory of its own, and the first night's answers serve the others.
_RUNNER_PLACES = ("RUNNER_TEMP", "RUNNER_TOOL_CACHE")


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def tree_digest(root: Path, patterns: Sequence[str] = ("**/*",)) -> str:
    """The names and contents of the files under ``root`` that match ``patterns``, relative to ``root``.

    ``glob``, not ``rglob``: rglob matches a pattern at any depth, so ``matrix/**/*.py`` also took every
    ``.../matrix/...`` and ``.../repro/...`` of the venvs under the kit (torch has both): seconds per key,
    and a key that changed with them.
    """
    files = sorted({p for pattern in patterns for p in root.glob(pattern) if p.is_file()})
    return _digest(*(part for p in files for part in (str(p.relative_to(root)).encode(), p.read_bytes())))


def _places() -> list[tuple[str, str]]:
    """Each place of this run (``_RUNNER_PLACES``) by the name the key gives it, the longest path first: a venv in the
    checkout is named as the venv."""
    places = {"<venv>": sys.prefix, "<kit>": str(_KIT)}
    places |= {f"<{name}>": os.environ.get(name, "") for name in _RUNNER_PLACES}
    return sorted(((name, path) for name, path in places.items() if path), key=lambda place: -len(place[1]))


def _placed(text: str, places: list[tuple[str, str]]) -> str:
    for name, path in places:
        text = text.replace(path, name)
    return text


def _package_digest(name: str, places: list[tuple[str, str]]) -> str:
    """Where ``name`` is imported from (by its place) and what its files are, without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        return "absent"
    origin = Path(spec.origin).resolve()
    where = _placed(str(origin), places).encode()
    try:
        record = metadata.distribution(name).read_text("RECORD")
    except metadata.PackageNotFoundError:
        record = None
    if record is not None and spec.submodule_search_locations is not None:
        # The wheel's RECORD holds every installed file's hash; the package directory is what is imported. Not the
        # scripts it put in the venv's bin/ (`../../../bin/vllm`), whose first line names that venv's Python.
        files = "\n".join(line for line in record.splitlines() if not line.startswith("../"))
        return _digest(where, files.encode())
    return _digest(where, tree_digest(origin.parent, ("**/*.py",)).encode())


def _distributions() -> list[str]:
    """Every distribution installed where this process imports from, by its metadata folder's name (its name and
    version): two venvs in other places are one installation only where they hold the same."""
    folders = (os.scandir(path or ".") for path in sys.path if os.path.isdir(path or "."))
    return sorted(
        entry.name for folder in folders for entry in folder if entry.name.endswith((".dist-info", ".egg-info"))
    )


def environment_key(salt: str = "") -> str:
    """What every answer of this process's children shares: the installation (every distribution, and the files of
    the three vLLM's answers rest on), the kit and the environment, each path named by its place
    (``_RUNNER_PLACES``); the interpreter a venv was made from by its own path."""
    places = _places()
    env = sorted(
        (k, _placed(v, places))
        for k, v in os.environ.items()
        if k not in _ENV_IGNORED and (k.startswith(_ENV_PREFIXES) or k in _ENV_NAMES)
    )
    return _digest(
        _placed(sys.executable, places).encode(),
        sys.base_prefix.encode(),
        sys.version.encode(),
        repr(platform.uname()).encode(),
        repr(env).encode(),
        _package_digest("vllm", places).encode(),
        _package_digest("torch", places).encode(),
        _package_digest("transformers", places).encode(),
        repr(_distributions()).encode(),
        tree_digest(_KIT, ("matrix/**/*.py", "matrix/**/*.toml", "repro/**/*.py")).encode(),
        salt.encode(),
    )


@dataclass(frozen=True)
class Memory:
    """Where one question's answers are kept for this environment, and how long a caller allows now."""

    cache: Path
    question: str  # names the function a child runs
    shared: str  # environment_key(): what every answer here shares
    allowed: float  # seconds: a remembered answer that took longer is not given
    places: tuple[tuple[str, str], ...] = ()  # _places(): a path in a question is named by its place, as in the key

    def _path(self, arg: Any) -> Path:
        asked = _placed(repr(arg), list(self.places)).encode()
        return self.cache / f"{_digest(self.question.encode(), self.shared.encode(), asked)}.pickle"

    def recall(self, arg: Any) -> Outcome | None:
        try:
            with self._path(arg).open("rb") as f:
                outcome = pickle.load(f)  # noqa: S301 - written by this test session's own processes, below
        except Exception:  # noqa: BLE001 - absent, cut short or not an answer: asked again
            return None
        return outcome if isinstance(outcome, Outcome) and outcome.seconds < self.allowed else None

    def remember(self, arg: Any, outcome: Outcome) -> None:
        if outcome.status not in _KEPT:
            return
        fd, tmp = tempfile.mkstemp(dir=self.cache, prefix=".answer-")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(outcome, f)
        os.replace(tmp, self._path(arg))


def memory(question: str, timeout: float, salt: str = "") -> Memory | None:
    """The answers kept for ``question`` (``salt``: what they depend on beyond the installation), or None
    where this process keeps none (``WSLPIN_ANSWER_CACHE`` unset)."""
    where = os.environ.get(CACHE_VARIABLE)
    if not where:
        return None
    cache = Path(where)
    cache.mkdir(parents=True, exist_ok=True)
    return Memory(cache, question, environment_key(salt), time_left(timeout), tuple(_places()))


def kept_directory(name: str) -> Path | None:
    """A directory ``name`` kept as long as the answers are (the kit's test session), or None where none are."""
    where = os.environ.get(CACHE_VARIABLE)
    if not where:
        return None
    directory = Path(where) / name
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def run_remembered(
    question: str,
    fn: Callable[[Any], Any],
    args: Sequence[Any],
    timeout: float,
    jobs: int | None = None,
    before: Callable[[int], None] = lambda children: None,
    salt: str = "",
) -> list[Outcome]:
    """``run_isolated(fn, args)``, answering from the cache what it already holds (``question`` names ``fn``).

    ``before(children)`` runs only when some child must start, told how many (the parent's preload); ``salt`` adds
    what the answers depend on beyond the installation (the files a request names, say).
    """
    kept = memory(question, timeout, salt)
    if kept is None:
        before(len(args))
        return run_isolated(fn, args, timeout=timeout, jobs=jobs)
    found = [kept.recall(arg) for arg in args]
    missing = [i for i, outcome in enumerate(found) if outcome is None]
    if missing:
        before(len(missing))
        for i, outcome in zip(missing, run_isolated(fn, [args[i] for i in missing], timeout, jobs), strict=True):
            found[i] = outcome
            kept.remember(args[i], outcome)
    answered = [outcome for outcome in found if outcome is not None]
    assert len(answered) == len(args)
    return answered
