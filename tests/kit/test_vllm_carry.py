"""tools/vllm_carry.py end to end, with no network: a stand-in vLLM wheel cut into chunks, carried one chunk per
call into a machine that has never seen it, and installed there by each chunk's install.sh as the device calls of
docs/device-run.md run it.

The stand-in is what the tool and the script see of a real wheel: ``vllm/__init__.py`` with its release, files of
random bytes (which gzip cannot shrink, so the stream is cut into several pieces), the files a real wheel holds
that must stay behind, and a dist-info. The extra wheel is a pure-Python package, ``carrydep``, whole enough for
``pip install --no-index --no-deps --target``.
"""

from __future__ import annotations

import base64
import hashlib
import math
import os
import random
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT

from matrix.errors import MatrixError
from repro import gpu_run
from tools import vllm_carry

TOOL = ROOT / "tools" / "vllm_carry.py"
RELEASE = "0.26.0"
# Five files of 32 KiB of random bytes: a stream of some 160 KiB, four pieces at 0.05 MiB, sixteen at 0.01.
PADDING = {f"vllm/model_executor/pad_{i}.bin": random.Random(i).randbytes(32 << 10) for i in range(5)}
# What a real 0.26.0 wheel holds and prepare leaves out (one of each kind), and neighbours of theirs that travel.
LEFT_OUT = (
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",
    "vllm/vllm-rs",
    "vllm/_flashmla_C.abi3.so",
    "vllm/_qutlass_C.abi3.so",
    "vllm/_moe_C_stable_libtorch.abi3.so",
    "vllm/entrypoints/serve/instrumentator/static/swagger-ui-bundle.js",
    "vllm/third_party/deep_gemm/include/deep_gemm/common/utils.cuh",
)
KEPT = (
    "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so",
    "vllm/entrypoints/serve/instrumentator/__init__.py",
    "vllm/third_party/deep_gemm/__init__.py",
)


def write_wheel(folder: Path, name: str, version: str, tag: str, files: dict[str, bytes]) -> Path:
    """A wheel of ``files`` with the dist-info pip checks: METADATA, WHEEL, and a RECORD of every file's hash."""
    dist = f"{name}-{version}.dist-info"
    purelib = "true" if tag.endswith("-none-any") else "false"
    files = {
        **files,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: {purelib}\nTag: {tag}\n".encode(),
    }
    record = [
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for path, data in files.items()
    ]
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,", ""]).encode()
    path = folder / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for member, data in files.items():
            wheel.writestr(member, data)
    return path


@dataclass(frozen=True)
class StandIns:
    vllm: Path
    carrydep: Path
    extra: Path  # the extras file: carrydep's pin
    wheels: Path  # the folder --extra-wheels names


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory) -> StandIns:
    folder = tmp_path_factory.mktemp("wheels")
    vllm = {
        "vllm/__init__.py": f'__version__ = "{RELEASE}"\n'.encode(),
        **PADDING,
        **{path: b"\x7fELF left behind\n" for path in LEFT_OUT},
        **{path: b"# travels\n" for path in KEPT},
    }
    carrydep = {"carrydep/__init__.py": b"VALUE = 42\n"}
    wheels = folder / "extra"
    wheels.mkdir()
    extra = folder / "extra.txt"
    extra.write_text("# the stand-in's one extra package\ncarrydep==1.0\n")
    return StandIns(
        vllm=write_wheel(folder, "vllm", RELEASE, "cp38-abi3-linux_x86_64", vllm),
        carrydep=write_wheel(wheels, "carrydep", "1.0", "py3-none-any", carrydep),
        extra=extra,
        wheels=wheels,
    )


def _has_pip(python: str, env: dict[str, str]) -> bool:
    done = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, env=env, check=False)
    return done.returncode == 0


@pytest.fixture(scope="module")
def python3(tmp_path_factory) -> Path:
    """A folder whose ``python3`` has pip, which install.sh runs (as the lent machine's python3 has it).

    This Python where it has pip; else this Python with the pip wheel its ensurepip bundles on its path (the kit's
    venv has no pip); else the first other python3 on PATH that has pip. This machine's pip configuration stays
    out of it: the calls install from their own wheels alone.
    """
    folder = tmp_path_factory.mktemp("bin")
    quiet = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PYTHONPATH": ""}
    try:
        import ensurepip  # Debian's Python keeps it in another package: then the next candidate serves
    except ImportError:
        bundled = []
    else:
        bundled = sorted((Path(ensurepip.__file__).parent / "_bundled").glob("pip-*.whl"))
    if _has_pip(sys.executable, quiet):
        launch = f"exec {sys.executable}"
    elif bundled and _has_pip(sys.executable, {**quiet, "PYTHONPATH": str(bundled[-1])}):
        launch = f'PYTHONPATH="{bundled[-1]}${{PYTHONPATH:+:$PYTHONPATH}}" exec {sys.executable}'
    else:
        others = [str(Path(p) / "python3") for p in os.environ["PATH"].split(os.pathsep) if p]
        found = [p for p in others if os.access(p, os.X_OK) and _has_pip(p, quiet)]
        if not found:
            pytest.skip("no Python here has pip, which install.sh runs")
        launch = f"exec {found[0]}"
    script = folder / "python3"
    script.write_text(f'#!/bin/sh\nexport PIP_CONFIG_FILE={os.devnull}\n{launch} "$@"\n')
    script.chmod(0o755)
    return folder


def prepare(out: Path, *args: str, python: str = sys.executable, env: dict | None = None):
    return subprocess.run(
        [python, str(TOOL), "prepare", str(out), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", **(env or {})},
        timeout=120,
        check=False,
    )


def prepare_stand_in(stand_ins: StandIns, out: Path, chunk_mib: float) -> subprocess.CompletedProcess:
    done = prepare(
        out,
        *("--wheel", str(stand_ins.vllm), "--extra", str(stand_ins.extra), "--extra-wheels", str(stand_ins.wheels)),
        *("--chunk-mib", f"{chunk_mib:g}", "--cache", str(out.parent / "cache")),
    )
    assert done.returncode == 0, done.stderr
    return done


def chunks_in(out: Path) -> list[Path]:
    """OUT's chunk-1..N, checked to be that and nothing else (besides the .gitignore that keeps OUT out of commits)."""
    names = {path.name for path in out.iterdir()}
    count = len(names) - 1
    assert names == {".gitignore", *(f"chunk-{k}" for k in range(1, count + 1))}, sorted(names)
    return [out / f"chunk-{k}" for k in range(1, count + 1)]


def carry_and_install(chunks: Sequence[Path], order: Sequence[int], home: Path, python3: Path) -> list[str]:
    """Each chunk's device call in ``order``: a tree of its own holding only that chunk, and the chunk's command
    as gpu_run.DEVICE_CALLS gives it; ``home`` is all that outlasts a call, as the machine's /tmp does while warm.
    What each call printed."""
    env = {**os.environ, "VLLM_GPU_HOME": str(home), "PATH": f"{python3}{os.pathsep}{os.environ['PATH']}"}
    env.pop("PYTHONPATH", None)
    said = []
    for k in order:
        tree = home.parent / f"call-{k}"
        shutil.copytree(chunks[k - 1], tree / gpu_run.VLLM_CHUNKS / f"chunk-{k}")
        command = f"bash {gpu_run.VLLM_CHUNKS}/chunk-{k}/install.sh {gpu_run.VLLM_CHUNKS}/chunk-{k}"
        done = subprocess.run(
            ["bash", "-c", command], cwd=tree, env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, f"call {k}: {done.stdout}{done.stderr}"
        said.append(done.stdout.strip())
        shutil.rmtree(tree)
    return said


def imported_from(site: Path) -> list[str]:
    """What this Python finds of vllm and carrydep with only ``site`` on its path (the kit's venv has a vLLM too)."""
    code = "import vllm, carrydep; print(vllm.__version__, carrydep.VALUE, vllm.__file__, carrydep.__file__)"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"} | {"PYTHONPATH": str(site)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_the_chunks_carried_call_by_call_install_vllm_and_its_extra_wheels_on_a_fresh_machine(
    stand_ins, python3, tmp_path
):
    out = tmp_path / "kit" / ".gpu-carry"
    done = prepare_stand_in(stand_ins, out, 0.05)
    limit = math.floor(0.05 * vllm_carry.MIB)
    chunks = chunks_in(out)
    count = len(chunks)
    assert count >= 3
    assert [p.name for p in out.parent.iterdir()] == [out.name], "a folder prepare made beside OUT was left"
    for k, chunk in enumerate(chunks, start=1):
        assert {p.name for p in chunk.iterdir()} == {"install.sh", f"piece.{k}", "total", "sha256"}
        piece = (chunk / f"piece.{k}").stat().st_size
        assert piece == limit if k < count else 0 < piece <= limit
        assert vllm_carry.size_of(chunk) <= limit + vllm_carry.CHUNK_FILES_BYTES
        assert (chunk / "total").read_text() == f"{count}\n"
        assert (chunk / "install.sh").read_bytes() == vllm_carry.INSTALL_SCRIPT.read_bytes()
        assert f"{out}/chunk-{k} " in done.stdout
    assert re.search(rf"^total .* in {count} chunk", done.stdout, re.MULTILINE), done.stdout

    home = tmp_path / "device" / "vllm-gpu"
    said = carry_and_install(chunks, range(1, count + 1), home, python3)
    assert said == [*(f"have {k} of {count} chunks" for k in range(1, count)), f"vllm {RELEASE} ready"]
    site = home / "site"
    assert not [path for path in LEFT_OUT if (site / path).exists()]
    assert all((site / path).is_file() for path in KEPT)
    assert all((site / path).read_bytes() == data for path, data in PADDING.items())
    assert (site / "carrydep" / "__init__.py").is_file() and not (site / vllm_carry.WHEELS).exists()
    assert not (home / "in").exists(), "the pieces stay behind once unpacked"
    version, value, *files = imported_from(site)
    assert (version, value) == (RELEASE, "42") and all(f.startswith(str(site)) for f in files), files


def test_ten_pieces_and_more_are_joined_by_number_in_whatever_order_the_calls_bring_them(stand_ins, python3, tmp_path):
    out = tmp_path / "out"
    prepare_stand_in(stand_ins, out, 0.01)
    chunks = chunks_in(out)
    count = len(chunks)
    assert count >= 10, "piece.10 sorts before piece.2 by name"
    home = tmp_path / "device" / "vllm-gpu"
    said = carry_and_install(chunks, range(count, 0, -1), home, python3)
    assert said == [*(f"have {k} of {count} chunks" for k in range(1, count)), f"vllm {RELEASE} ready"]
    assert all((home / "site" / path).read_bytes() == data for path, data in PADDING.items())


def test_a_piece_that_changed_on_the_way_is_refused_and_nothing_is_unpacked(stand_ins, python3, tmp_path):
    out = tmp_path / "out"
    prepare_stand_in(stand_ins, out, 0.05)
    chunks = chunks_in(out)
    piece = chunks[0] / "piece.1"
    piece.write_bytes(piece.read_bytes()[:-1] + b"\0")
    home = tmp_path / "device" / "vllm-gpu"
    with pytest.raises(AssertionError, match="do not make the stream they were cut from"):
        carry_and_install(chunks, range(1, len(chunks) + 1), home, python3)
    assert not (home / "site").exists()


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    ("mistake", "said"),
    [
        # Refused before anything is written.
        (lambda s: ("--wheel", str(s.carrydep)), "not a vLLM wheel"),
        # Refused while the stream is written: the chunks made so far go, the old ones stay.
        (lambda s: ("--wheel", str(s.vllm), "--chunk-mib", "0.0001"), f"more than {vllm_carry.MAX_CHUNKS} chunks"),
    ],
    ids=["not-vllm", "too-many-chunks"],
)
def test_a_prepare_that_fails_says_so_in_one_line_and_leaves_the_chunks_there_were(stand_ins, tmp_path, mistake, said):
    out = tmp_path / "kit" / ".gpu-carry"
    prepare_stand_in(stand_ins, out, 0.05)
    before = snapshot(out)
    args = ("--extra", str(stand_ins.extra), "--extra-wheels", str(stand_ins.wheels), "--cache", str(tmp_path))
    done = prepare(out, *mistake(stand_ins), *args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1 and said in done.stderr, done.stderr
    assert snapshot(out) == before
    assert [p.name for p in out.parent.iterdir()] == [out.name], "a folder prepare made beside OUT was left"


def test_an_out_that_is_a_file_is_refused_and_kept(stand_ins, tmp_path):
    out = tmp_path / "chunks"
    out.write_text("mine\n")
    done = prepare(out, "--wheel", str(stand_ins.vllm), "--extra-wheels", str(stand_ins.wheels))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert done.stderr.startswith(f"error: {out} is a file, not a folder of chunks: give a folder")
    assert out.read_text() == "mine\n"


def test_a_download_that_fails_names_the_release_and_the_index_it_needs(python3, tmp_path):
    """With pip kept from any index (PIP_NO_INDEX), as on a machine that cannot reach one."""
    out, cache = tmp_path / "out", tmp_path / "cache"
    done = prepare(out, "--vllm", RELEASE, "--cache", str(cache), python=str(python3 / "python3"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"error: pip could not download vllm=={RELEASE} (")
    assert "the package index must be reachable from here; or give its wheel with --wheel FILE" in done.stderr
    assert not out.exists() and not list(cache.rglob("*.whl"))


def test_the_kits_extras_are_pinned_for_the_release_it_carries():
    pins = vllm_carry.read_pins(vllm_carry.EXTRA)
    assert pins and len({vllm_carry.normal(pin.name) for pin in pins}) == len(pins)
    assert f"vLLM {vllm_carry.RELEASE}" in vllm_carry.EXTRA.read_text().splitlines()[0]


@pytest.mark.parametrize(
    ("text", "said"),
    [("fastapi>=0.1\n", "is not NAME==VERSION"), ("a==1\nA==2\n", "pinned twice")],
    ids=["unpinned", "twice"],
)
def test_an_extras_line_that_is_no_single_pin_is_refused(tmp_path, text, said):
    extra = tmp_path / "extra.txt"
    extra.write_text(text)
    with pytest.raises(MatrixError, match=said):
        vllm_carry.read_pins(extra)


@pytest.mark.parametrize("chunk_mib", [0, -1, 1e-9, 63.99, math.nan, math.inf])
def test_a_chunk_size_that_cannot_travel_is_refused(chunk_mib):
    with pytest.raises(MatrixError, match="--chunk-mib"):
        vllm_carry.chunk_limit(chunk_mib)


def test_the_default_chunks_are_the_ones_the_device_calls_carry_and_the_docs_prepare():
    # A default piece and the files beside it fit what gpu_run allows a chunk (and so its call).
    beside = vllm_carry.INSTALL_SCRIPT.stat().st_size + 2 * 80
    assert vllm_carry.chunk_limit(vllm_carry.CHUNK_MIB) + beside <= gpu_run.CHUNK_LIMIT
    assert beside <= vllm_carry.CHUNK_FILES_BYTES
    # Each call runs its chunk's install.sh; the last puts the site install.sh fills by default on the path.
    for k, (command, carry) in enumerate(gpu_run.DEVICE_CALLS, start=1):
        assert command.startswith(f"bash {gpu_run.VLLM_CHUNKS}/chunk-{k}/install.sh {gpu_run.VLLM_CHUNKS}/chunk-{k}")
        assert f"{gpu_run.VLLM_CHUNKS}/chunk-{k}" in carry
    (home,) = re.findall(r"^home=\$\{VLLM_GPU_HOME:-(.+)\}$", vllm_carry.INSTALL_SCRIPT.read_text(), re.MULTILINE)
    assert f"export PYTHONPATH={home}/site " in gpu_run.DEVICE_CALLS[-1][0]
    docs = (ROOT / "docs" / "device-run.md").read_text()
    assert f"python3 tools/vllm_carry.py prepare {gpu_run.VLLM_CHUNKS}" in docs
