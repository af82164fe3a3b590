"""vLLM for the lent GPU machine, cut into chunks that travel one per device call (docs/device-run.md).

    python3 tools/vllm_carry.py prepare OUT [--vllm X.Y.Z | --wheel FILE] [--extra FILE] [--extra-wheels DIR]
                                [--python-version 3.12] [--chunk-mib 40] [--cache DIR]

The lent machine has the torch that vLLM 0.26.0 pins, but no vLLM and no package index; a call carries at
most 64 MiB, and the machine forgets its temporary files after 30 s idle. ``prepare`` takes a vLLM wheel
(``--wheel``, or ``vllm==X.Y.Z`` downloaded once into the cache), leaves out what a small Llama on Hopper never
loads (``STRIPPED``), adds the wheels of the packages the machine lacks (``--extra``: a pin per line, each
taken from ``--extra-wheels`` or the cache, or else downloaded for the machine's Python), and packs it all as
one gzip'd tar stream cut into pieces of at most ``--chunk-mib`` MiB. ``OUT/chunk-K`` holds ``piece.K``, the
number of pieces (``total``), the stream's SHA-256 (``sha256``) and ``install.sh``
(tools/vllm_carry_install.sh), which each device call runs as ``bash OUT/chunk-K/install.sh OUT/chunk-K``.

OUT is replaced whole once every chunk is written, never before: a prepare that fails leaves the chunks it
found. OUT holds a ``.gitignore`` of ``*``, so no commit takes it in whatever it is called. Standard library
only: it runs where a maintainer has python3 and pip, before any environment of the kit exists.
"""

from __future__ import annotations

import argparse
import calendar
import gzip
import hashlib
import math
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path, PurePosixPath
from typing import BinaryIO

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from matrix.errors import MatrixError  # noqa: E402
from matrix.text.cli import run_command_line  # noqa: E402

# The release whose torch pin (2.11.0) the lent machine's torch meets, and the one the extra wheels are for.
RELEASE = "0.26.0"
HERE = Path(__file__).resolve().parent
EXTRA = HERE / "vllm_carry_extra.txt"
INSTALL_SCRIPT = HERE / "vllm_carry_install.sh"
PYTHON_VERSION = "3.12"  # the lent machine's
MIB = 1 << 20
# A piece's bound. repro/gpu_run.py's CHUNK_LIMIT is this and room for the small files beside the piece.
CHUNK_MIB = 40.0
# What one device call carries, the kit's tree included, and what a chunk adds to its piece at most.
CALL_BYTES = 64 * MIB
CHUNK_FILES_BYTES = 64 << 10
# More chunks than this is a --chunk-mib typed wrong: each is a device call of its own.
MAX_CHUNKS = 999
# The Linux x86-64 wheels the lent machine's glibc loads, and pure-Python ones (pip's --platform, each).
PLATFORMS = (
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_5_x86_64",
    "manylinux1_x86_64",
    "any",
)

# What a small dense Llama on Hopper (the run's tiny model on the H200) never loads, left out so that vLLM
# travels in fewer calls; by the wheel's file, what it is (the summary names it so).
STRIPPED = {
    # FlashAttention 2's kernels: on Hopper, attention runs on FlashAttention 3's (which stay) or on Triton.
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so": "FlashAttention 2 kernels",
    # The Rust front end: only `vllm serve` starts it; an engine built in the Python process never does.
    "vllm/vllm-rs": "Rust front end",
    # FlashMLA: kernels for multi-head latent attention (DeepSeek's models); Llama's attention is not latent.
    "vllm/_flashmla_C.abi3.so": "MLA kernels",
    # QuTLASS: FP4 kernels for quantised weights; the tiny model's weights are not quantised.
    "vllm/_qutlass_C.abi3.so": "FP4 kernels",
    # Mixture-of-experts kernels: Llama is a dense model, with no experts to route to.
    "vllm/_moe_C_stable_libtorch.abi3.so": "MoE kernels",
}
# The API server's documentation page (Swagger UI's script and style): the API server is not carried at all.
SERVER_STATIC = "vllm/entrypoints/serve/instrumentator/static/"
# Of the vendored third-party kernels only their Python stays: the rest is C++ and CUDA headers and sources
# that other kernels (DeepGEMM, FlashMLA, ...) are compiled from at run time, which this model never asks for.
THIRD_PARTY = "vllm/third_party/"

PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)")
# The stream's folder of extra wheels, beside vLLM's files: install.sh installs them, then removes it.
WHEELS = ".wheels"
# OUT and the folders made beside it are never committed, whatever their names.
IGNORE_ALL = "# Written by tools/vllm_carry.py: nothing here is committed.\n*\n"


def stripped_as(name: str) -> str | None:
    """What the wheel's file ``name`` is, when it is one left out (``STRIPPED``); None for one that travels."""
    if name in STRIPPED:
        return STRIPPED[name]
    if name.startswith(SERVER_STATIC):
        return "API server's static files"
    if name.startswith(THIRD_PARTY) and not name.endswith(".py"):
        return "third-party kernel sources"
    return None


def normal(name: str) -> str:
    """A distribution's name as wheel file names compare it."""
    return re.sub(r"[-_.]+", "_", name).lower()


@dataclass(frozen=True)
class Pin:
    """One ``NAME==VERSION`` line of an extras file."""

    name: str
    version: str

    def __str__(self) -> str:
        return f"{self.name}=={self.version}"

    def wheel_in(self, folder: Path) -> Path | None:
        """The wheel of this release in ``folder``, if one is there."""
        for path in sorted(folder.glob("*.whl")) if folder.is_dir() else ():
            parts = path.name[: -len(".whl")].split("-")
            if len(parts) in (5, 6) and normal(parts[0]) == normal(self.name) and parts[1] == self.version:
                return path
        return None


def read_pins(path: Path) -> list[Pin]:
    """The pins an extras file lists, one ``NAME==VERSION`` a line; ``#`` starts a comment."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise MatrixError(
            f"--extra {path}: cannot read it ({exc.strerror}): give a file of NAME==VERSION lines, "
            f"such as tools/{EXTRA.name}"
        ) from None
    pins: dict[str, Pin] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        spec = line.partition("#")[0].strip()
        if not spec:
            continue
        found = PIN.fullmatch(spec)
        if found is None:
            raise MatrixError(f"{path}:{number}: {spec!r} is not NAME==VERSION: pin each extra wheel to one release")
        pin = Pin(found.group(1), found.group(2))
        if normal(pin.name) in pins:
            raise MatrixError(f"{path}:{number}: {pin.name} is pinned twice: keep one line for it")
        pins[normal(pin.name)] = pin
    return list(pins.values())


@dataclass(frozen=True)
class VllmWheel:
    path: Path
    version: str


def _safe(name: str) -> bool:
    """Whether a wheel's member unpacks inside the site folder."""
    path = PurePosixPath(name)
    return not path.is_absolute() and ".." not in path.parts and "\\" not in name


def vllm_wheel(path: Path, given: str) -> VllmWheel:
    """``path`` as a vLLM wheel, with its release; ``given`` says where it came from in the one-line error."""
    what_to_do = "give a vLLM wheel (vllm-<version>-<tags>.whl) or a release with --vllm"
    try:
        with zipfile.ZipFile(path) as wheel:
            names = wheel.namelist()
            metadata = [n for n in names if re.fullmatch(r"vllm-[^/]+\.dist-info/METADATA", n)]
            if "vllm/__init__.py" not in names or not metadata:
                raise MatrixError(f"{given}: not a vLLM wheel (no vllm/__init__.py and vllm's METADATA): {what_to_do}")
            headers = HeaderParser().parsestr(wheel.read(metadata[0]).decode(errors="replace"))
    except FileNotFoundError:
        raise MatrixError(f"{given}: there is none: {what_to_do}") from None
    except (zipfile.BadZipFile, OSError) as exc:
        raise MatrixError(f"{given}: not a wheel ({exc}): {what_to_do}") from None
    unsafe = [n for n in names if not _safe(n)]
    if unsafe:
        raise MatrixError(f"{given}: the wheel holds {unsafe[0]!r}, outside any folder it unpacks into: {what_to_do}")
    if normal(headers.get("Name", "")) != "vllm" or not headers.get("Version"):
        raise MatrixError(f"{given}: its METADATA names no vllm release: {what_to_do}")
    return VllmWheel(path, str(headers["Version"]))


def _pip_download(specs: Sequence[str], into: Path, python_version: str, instead: str) -> None:
    """Binary wheels of ``specs`` for the lent machine into ``into``, by this Python's pip (no dependencies).

    They land in a folder of their own first: a download that stops half-way leaves nothing the cache would
    take for a wheel.
    """
    into.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".landing-", dir=into) as landing:
        argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
        argv += ["--python-version", python_version, "--implementation", "cp"]
        argv += [f"--platform={platform}" for platform in PLATFORMS]
        argv += ["--dest", landing, *specs]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            said = [line.strip() for line in done.stderr.splitlines() if line.strip()]
            last = said[-1][:300] if said else f"exit {done.returncode}"
            if "No module named pip" in done.stderr:
                raise MatrixError(f"this Python ({sys.executable}) has no pip to download {' '.join(specs)}: {instead}")
            raise MatrixError(
                f"pip could not download {' '.join(specs)} ({last}): each must exist as a wheel for CPython "
                f"{python_version} on Linux x86-64, and the package index must be reachable from here; {instead}"
            )
        for path in Path(landing).glob("*.whl"):
            os.replace(path, into / path.name)


def cached_vllm(release: str, cache: Path, python_version: str) -> Path:
    """vLLM ``release``'s wheel from the cache, downloaded into it the first time."""
    pin, folder = Pin("vllm", release), cache / "vllm"
    wheel = pin.wheel_in(folder)
    if wheel is None:
        _pip_download([str(pin)], folder, python_version, "or give its wheel with --wheel FILE")
        wheel = pin.wheel_in(folder)
    if wheel is None:
        raise MatrixError(f"pip downloaded no wheel named vllm-{release}-*.whl into {folder}: give one with --wheel")
    return wheel


def extra_wheels(pins: Sequence[Pin], local: Path | None, cache: Path, python_version: str) -> list[Path]:
    """A wheel for each pin: from ``local``, else the cache, else downloaded into the cache."""
    folder = cache / f"extra-cp{python_version.replace('.', '')}"
    found = {pin: (pin.wheel_in(local) if local is not None else None) or pin.wheel_in(folder) for pin in pins}
    missing = [str(pin) for pin, wheel in found.items() if wheel is None]
    if missing:
        _pip_download(missing, folder, python_version, "or give a folder holding those wheels with --extra-wheels DIR")
        found = {pin: wheel or pin.wheel_in(folder) for pin, wheel in found.items()}
    unfound = [str(pin) for pin, wheel in found.items() if wheel is None]
    if unfound:
        raise MatrixError(f"pip downloaded no wheel of {' '.join(unfound)} into {folder}: check the pins' names")
    wheels = [wheel for wheel in found.values() if wheel is not None]
    for wheel in wheels:
        if not zipfile.is_zipfile(wheel):
            raise MatrixError(f"{wheel}: not a wheel (no zip archive): remove it, and it is downloaded again")
    return wheels


class Pieces:
    """A stream written as ``chunk-K/piece.K`` files of at most ``limit`` bytes each under ``folder``, K from 1."""

    def __init__(self, folder: Path, limit: int) -> None:
        self.folder, self.limit = folder, limit
        self.digest = hashlib.sha256()
        self.sizes: list[int] = []
        self._piece: BinaryIO | None = None

    def _next(self) -> BinaryIO:
        if self._piece is not None:
            self._piece.close()
        if len(self.sizes) == MAX_CHUNKS:
            raise MatrixError(f"more than {MAX_CHUNKS} chunks, each a device call: give a larger --chunk-mib")
        self.sizes.append(0)
        chunk = self.folder / f"chunk-{len(self.sizes)}"
        chunk.mkdir()
        self._piece = (chunk / f"piece.{len(self.sizes)}").open("wb")
        return self._piece

    def write(self, data: bytes) -> int:
        view = memoryview(data).cast("B")
        written = len(view)
        self.digest.update(view)
        while view:
            piece = self._piece if self._piece is not None and self.sizes[-1] < self.limit else self._next()
            count = min(self.limit - self.sizes[-1], len(view))
            piece.write(view[:count])
            self.sizes[-1] += count
            view = view[count:]
        return written

    def flush(self) -> None:
        if self._piece is not None:
            self._piece.flush()

    def close(self) -> None:
        if self._piece is not None:
            self._piece.close()


@dataclass
class Packed:
    """What the stream holds: the chunks' pieces, its SHA-256, and the bytes of what was left out, by kind."""

    pieces: list[int]
    sha256: str
    left_out: dict[str, int] = field(default_factory=dict)


def pack(vllm: Path, wheels: Sequence[Path], folder: Path, limit: int) -> Packed:
    """vLLM's files, less what is left out, and ``wheels`` under ``.wheels/``: one gzip'd tar, cut into pieces.

    Read from the wheel straight into the stream, nothing unpacked here. Every entry is root's, a wheel's
    member dated as the wheel dates it, and the gzip header holds no time: the same files make the same stream.
    """
    pieces = Pieces(folder, limit)
    left_out: dict[str, int] = {}
    with gzip.GzipFile(filename="", mode="wb", compresslevel=6, fileobj=pieces, mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            with zipfile.ZipFile(vllm) as wheel:
                for member in wheel.infolist():
                    if member.is_dir():
                        continue
                    kind = stripped_as(member.filename)
                    if kind is not None:
                        left_out[kind] = left_out.get(kind, 0) + member.file_size
                        continue
                    info = tarfile.TarInfo(member.filename)
                    info.size = member.file_size
                    info.mtime = calendar.timegm((*member.date_time, 0, 0, 0))
                    info.mode = 0o755 if (member.external_attr >> 16) & 0o111 else 0o644
                    with wheel.open(member) as data:
                        tar.addfile(info, data)
            for path in wheels:
                info = tarfile.TarInfo(f"{WHEELS}/{path.name}")
                info.size, info.mtime, info.mode = path.stat().st_size, int(path.stat().st_mtime), 0o644
                with path.open("rb") as data:
                    tar.addfile(info, data)
    pieces.close()
    return Packed(pieces.sizes, pieces.digest.hexdigest(), left_out)


def chunk_limit(chunk_mib: float) -> int:
    """``--chunk-mib`` as a piece's bytes, or one line when a chunk so cut could not travel in a call."""
    most = (CALL_BYTES - CHUNK_FILES_BYTES) / MIB
    limit = int(chunk_mib * MIB) if math.isfinite(chunk_mib) else 0
    if limit < 1 or chunk_mib > most:
        raise MatrixError(
            f"--chunk-mib {chunk_mib:g}: give more than 0 and at most {most:g} MiB: a chunk travels in one device "
            f"call, which carries at most {CALL_BYTES // MIB} MiB with the kit's tree"
        )
    return limit


def default_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "wslpin-kit" / "vllm-carry"


def _replace(out: Path, made: Path) -> None:
    """``made`` becomes ``out``; the folder that was ``out`` goes only once ``made`` has taken its place."""
    if not (out.exists() or out.is_symlink()):
        os.replace(made, out)
        return
    trash = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    try:
        (trash / ".gitignore").write_text(IGNORE_ALL)
        os.replace(out, trash / out.name)
        os.replace(made, out)
    finally:
        shutil.rmtree(trash, ignore_errors=True)


def size_of(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


@dataclass(frozen=True)
class Prepared:
    out: Path
    vllm: VllmWheel
    wheels: tuple[Path, ...]
    chunks: tuple[int, ...]  # each chunk folder's bytes
    left_out: dict[str, int]


def prepare(
    out: Path,
    *,
    wheel: Path | None = None,
    release: str = RELEASE,
    extra: Path = EXTRA,
    extra_wheels_in: Path | None = None,
    python_version: str = PYTHON_VERSION,
    chunk_mib: float = CHUNK_MIB,
    cache: Path | None = None,
) -> Prepared:
    """Write ``out/chunk-1..N`` (the module says what each holds), replacing ``out`` only once all are written."""
    # Every mistake a person can make is found before anything is downloaded or written.
    if out.exists() and not out.is_dir():
        raise MatrixError(f"{out} is a file, not a folder of chunks: give a folder (the kit's is .gpu-carry)")
    limit = chunk_limit(chunk_mib)
    if not re.fullmatch(r"3\.\d{1,2}", python_version):
        raise MatrixError(f"--python-version {python_version!r}: give the lent machine's, as 3.12")
    if wheel is None and not PIN.fullmatch(f"vllm=={release}"):
        raise MatrixError(f"--vllm {release!r} is no release number: give one such as {RELEASE}")
    pins = read_pins(extra)
    if extra_wheels_in is not None and not extra_wheels_in.is_dir():
        raise MatrixError(f"--extra-wheels {extra_wheels_in}: no such folder: give the folder holding the wheels")
    cache = cache or default_cache()
    if wheel is not None:
        carried = vllm_wheel(wheel, f"--wheel {wheel}")
    else:
        found = cached_vllm(release, cache, python_version)
        carried = vllm_wheel(found, str(found))
    wheels = extra_wheels(pins, extra_wheels_in, cache, python_version)

    out.parent.mkdir(parents=True, exist_ok=True)
    made = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=out.parent))
    try:
        (made / ".gitignore").write_text(IGNORE_ALL)
        packed = pack(carried.path, wheels, made, limit)
        for number in range(1, len(packed.pieces) + 1):
            chunk = made / f"chunk-{number}"
            (chunk / "total").write_text(f"{len(packed.pieces)}\n")
            (chunk / "sha256").write_text(f"{packed.sha256}\n")
            shutil.copyfile(INSTALL_SCRIPT, chunk / "install.sh")
            (chunk / "install.sh").chmod(0o755)
        made.chmod(0o755)
        chunks = tuple(size_of(made / f"chunk-{number}") for number in range(1, len(packed.pieces) + 1))
        _replace(out, made)
    except BaseException:
        shutil.rmtree(made, ignore_errors=True)
        raise
    return Prepared(out, carried, tuple(wheels), chunks, packed.left_out)


def _size(count: int) -> str:
    return f"{count / MIB:.1f} MiB" if count >= MIB // 10 else f"{count / 1024:.1f} KiB"


def _cmd_prepare(args: argparse.Namespace) -> int:
    done = prepare(
        args.out,
        wheel=args.wheel,
        release=args.vllm,
        extra=args.extra,
        extra_wheels_in=args.extra_wheels,
        python_version=args.python_version,
        chunk_mib=args.chunk_mib,
        cache=args.cache,
    )
    print(f"vllm {done.vllm.version} from {done.vllm.path.name}")
    if done.left_out:
        print(
            f"left out {_size(sum(done.left_out.values()))}:",
            ", ".join(f"{k} {_size(v)}" for k, v in done.left_out.items()),
        )
    print(f"{len(done.wheels)} extra wheel(s), {_size(sum(w.stat().st_size for w in done.wheels))}")
    width = len(str(done.out)) + len(f"/chunk-{len(done.chunks)}")
    for number, size in enumerate(done.chunks, start=1):
        print(f"{f'{done.out}/chunk-{number}':<{width}}  {_size(size):>10}")
    print(f"{'total':<{width}}  {_size(sum(done.chunks)):>10} in {len(done.chunks)} chunk(s)")
    chunk = f"{done.out}/chunk-K"
    print(f"then one device call per chunk, K = 1..{len(done.chunks)}, back to back: bash {chunk}/install.sh {chunk}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python3 tools/vllm_carry.py", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    prep = commands.add_parser(
        "prepare", help="write OUT/chunk-1..N", description="Write OUT/chunk-1..N, one per device call, back to back."
    )
    prep.add_argument(
        "out", type=Path, metavar="OUT", help="the folder of chunks, replaced whole (the kit's: .gpu-carry)"
    )
    source = prep.add_mutually_exclusive_group()
    source.add_argument("--vllm", default=RELEASE, metavar="X.Y.Z", help=f"the release to download (default {RELEASE})")
    source.add_argument("--wheel", type=Path, metavar="FILE", help="a vLLM wheel to carry instead of a download")
    prep.add_argument(
        "--extra", type=Path, default=EXTRA, metavar="FILE", help=f"NAME==VERSION lines (default tools/{EXTRA.name})"
    )
    prep.add_argument("--extra-wheels", type=Path, metavar="DIR", help="a folder to take the extra wheels from first")
    prep.add_argument(
        "--python-version", default=PYTHON_VERSION, metavar="X.Y", help=f"the machine's (default {PYTHON_VERSION})"
    )
    prep.add_argument(
        "--chunk-mib", type=float, default=CHUNK_MIB, metavar="MIB", help=f"a piece's most MiB (default {CHUNK_MIB:g})"
    )
    prep.add_argument(
        "--cache", type=Path, metavar="DIR", help="where downloads are kept (default ~/.cache/wslpin-kit/vllm-carry)"
    )
    prep.set_defaults(func=_cmd_prepare)
    return parser


if __name__ == "__main__":
    sys.exit(run_command_line(build_parser, sys.argv[1:]))
