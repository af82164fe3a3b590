"""The doctor a person gets without a checkout: the kit's wheel, which asks for Python 3.8 and installs nothing else,
installed offline as people install it (pip --user, pipx, uvx) on the oldest and newest Python, its console script,
the matrix the package carries, another machine's set-up from a pasted file, and a newer matrix from a URL (a
loopback server here)."""

from __future__ import annotations

import email.parser
import gzip
import http.server
import importlib.util
import json
import os
import shutil
import socket
import socketserver
import subprocess
import sys
import time
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, on_loopback
from test_system_pythons import python_or_skip

from matrix import __version__
from matrix.doctor import collected, published, remote
from matrix.errors import MatrixError
from matrix.host.classify import Gpu, HostFacts, environment_record

COMPAT = ROOT / "docs" / "matrix" / "compat.json"
# What the package may carry for the doctor: 14 releases with their answers per value of the variable and
# the runner per architecture take 510 KiB, each new one about 30 KiB.
PACKAGED_BUDGET = 512 * 1024
WSL2_KERNEL = "6.6.87.2-microsoft-standard-WSL2"
# vLLM 0.33.0's collect-env layout, as a user on a WSL2 machine with an RTX 3090 would paste it.
COLLECT_ENV = f"""\
==============================
        System Info
==============================
OS                           : Ubuntu 22.04.5 LTS (x86_64)

==============================
       PyTorch Info
==============================
PyTorch version              : 2.9.0+cu128
Is debug build               : False
CUDA used to build PyTorch   : 12.8
ROCM used to build PyTorch   : N/A

==============================
      Python Environment
==============================
Python version               : 3.12.11 (main, Jun  4 2025, 08:56:18) [GCC 11.4.0] (64-bit runtime)
Python platform              : Linux-{WSL2_KERNEL}-x86_64-with-glibc2.35

==============================
       CUDA / GPU Info
==============================
Is CUDA available            : True
GPU models and configuration :
GPU 0: NVIDIA GeForce RTX 3090
GPU 1: NVIDIA GeForce RTX 3090
Nvidia driver version        : 576.88

==============================
         vLLM Info
==============================
vLLM Version                 : 0.30.0 (git sha: 1a2b3c4)

==============================
     Environment Variables
==============================
VLLM_WSL2_ENABLE_PIN_MEMORY=1
NCCL_CUMEM_ENABLE=0
"""


def test_the_package_carries_the_published_matrixs_doctor_part_within_its_budget():
    document = json.loads(COMPAT.read_text())
    carried = published.PACKAGED.read_bytes()
    assert json.loads(carried) == published.doctor_part(document), "run `nox -s publish` and commit its outputs"
    assert len(carried) <= PACKAGED_BUDGET
    table = published.read_published(published.PACKAGED, "packaged")
    assert (table.generated_at, table.kit_commit) == (document["generated_at"], document["kit_commit"])
    assert [r.vllm for r in table.releases] == [v["vllm"] for v in document["versions"]]


def every_answer(table: published.Published) -> dict:
    """Each release's default runners, runners per architecture and every cell's entry, read from ``table``."""
    answers = {}
    for listed in table.releases:
        release = listed.read()
        cells = {cell_id: read() for cell_id, read in release.cells.items()}
        answers[release.vllm] = (release.default_runners, release.v2_architectures, cells)
    return answers


def test_the_carried_matrix_gives_the_answers_of_the_compat_json_and_of_its_layout_before(tmp_path):
    packaged = published.read_published(published.PACKAGED, "packaged")
    whole = published.read_published(COMPAT, "compat.json")
    # The layout before: one document, each release's cells in it with their ids (``--matrix`` reads it whole).
    index, *values = json.loads(published.PACKAGED.read_bytes())
    before, at = [], 0
    for version in index["versions"]:
        release, cells = values[at], values[at + 1 : at + 1 + len(version["cells"])]
        before.append(
            {**release, "cells": [{"id": i, **cell} for i, cell in zip(version["cells"], cells, strict=True)]}
        )
        at += 1 + len(cells)
    old = tmp_path / "old.json"
    old.write_text(json.dumps({**index, "schema": published.DOCTOR_SCHEMA_WHOLE, "versions": before}))
    answers = every_answer(packaged)
    assert len(answers) == len(index["versions"]) and all(len(cells) == 24 for _, _, cells in answers.values())
    assert every_answer(published.read_published(old, "old")) == answers == every_answer(whole)


def test_the_carried_matrix_is_read_only_where_it_answers(tmp_path):
    lines = published.PACKAGED.read_bytes().split(b"\n")
    index = json.loads(lines[0][1:-1])
    newest, oldest = index["versions"][0], index["versions"][-1]
    # The file ends with a newline: its last value is on the line before the last. The oldest release's line and
    # its cells' lines are the last ones; the newest's first cell is on line 3, after the index and its release.
    first = len(lines) - 2 - len(oldest["cells"])
    assert json.loads(lines[first][:-1])["vllm"] == oldest["vllm"]
    lines[first:-1] = [b"{not json,"] * (len(lines) - 1 - first)
    lines[2] = b"{not json either,"
    broken = tmp_path / "matrix.json"
    broken.write_bytes(b"\n".join(lines))
    table = published.read_published(broken, "broken")
    carried = published.read_published(published.PACKAGED, "carried").releases[0].read()
    release = table.releases[0].read()
    assert release.vllm == newest["vllm"] and release.default_runners == carried.default_runners
    for cell_id in newest["cells"][1:]:
        assert release.cells[cell_id]() == carried.cells[cell_id]()
    for read, line in ((release.cells[newest["cells"][0]], 3), (table.releases[-1].read, first + 1)):
        with pytest.raises(MatrixError) as refused:
            read()
        assert str(refused.value).startswith(f"broken is not a compat.json the doctor can read (line {line} cannot")
        assert str(refused.value).endswith(published.REGENERATE) and "\n" not in str(refused.value)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The kit's wheel, built here offline with its own build backend."""
    dist = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(dist)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("vllm_wslpin_kit-*.whl")
    return wheel


@pytest.fixture(scope="module")
def doctor(wheel, tmp_path_factory) -> Path:
    """``wslpin-doctor`` of the kit's wheel, installed offline in a venv."""
    where = tmp_path_factory.mktemp("installed")
    venv.create(where / "venv", with_pip=True)
    python = where / "venv" / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "--quiet", "--no-index", str(wheel)]
    installed = subprocess.run(pip, capture_output=True, text=True, check=False)
    assert installed.returncode == 0, installed.stderr
    return where / "venv" / "bin" / "wslpin-doctor"


def test_the_wheel_asks_for_python_3_8_and_installs_nothing_beside_the_doctor(wheel):
    with zipfile.ZipFile(wheel) as files:
        (name,) = [n for n in files.namelist() if n.endswith(".dist-info/METADATA")]
        meta = email.parser.Parser().parsestr(files.read(name).decode())
    assert meta["Requires-Python"] == ">=3.8"
    requires = meta.get_all("Requires-Dist") or []
    # Everything the other commands need comes with an extra (pyproject.toml), each of which brings the core one.
    assert requires and all("; extra == " in r for r in requires), requires
    assert {"core", "cell", "report", "bench", "container"} <= set(meta.get_all("Provides-Extra") or [])
    assert [r.split(";")[0] for r in requires if r.endswith("extra == 'cell'")] == [
        "defusedxml==0.7.1",
        "junitparser==5.0.3",
        "packaging>=24",
        "pytest==9.2.0",
    ]


# Ubuntu 20.04's Python and the newest: the doctor installed as a person installs a tool, with no index to reach.
INSTALL_PYTHONS = ("3.8", "3.13")
INSTALLERS = ("pip --user", "pipx", "uvx")


def _offline_env(home: Path) -> dict[str, str]:
    """A new user's environment: a fresh HOME (pip's user site, caches), no index or wheel directory configured."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "PIPX_", "PYTHON"))}
    return {**env, "HOME": str(home), "UV_PYTHON_DOWNLOADS": "never"}


def _installed(installer: str, python: str, wheel: Path, home: Path) -> list[str]:
    """Install ``wheel`` offline with ``installer`` for ``python``; the command that runs its doctor."""
    env = _offline_env(home)
    if installer == "uvx":
        uvx = shutil.which("uvx")
        if uvx is None:
            pytest.skip("no uvx on PATH (`pip install uv`)")
        # uvx installs on first use, into a cache made empty here.
        cache = str(home / "uv-cache")
        return [uvx, "--offline", "--cache-dir", cache, "--python", python, "--from", str(wheel), "wslpin-doctor"]
    if installer == "pipx":
        if importlib.util.find_spec("pipx") is None:
            pytest.skip("no pipx in this Python (the test extra has it)")
        env |= {"PIPX_HOME": str(home / "pipx"), "PIPX_BIN_DIR": str(home / "bin"), "PIPX_MAN_DIR": str(home / "man")}
        command = [sys.executable, "-m", "pipx", "install", "--python", python, "--pip-args=--no-index", str(wheel)]
        script = home / "bin" / "wslpin-doctor"
    else:
        command = [python, "-m", "pip", "install", "--quiet", "--user", "--no-index", str(wheel)]
        script = home / ".local" / "bin" / "wslpin-doctor"
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return [str(script)]


@pytest.mark.parametrize("installer", INSTALLERS)
@pytest.mark.parametrize("version", INSTALL_PYTHONS)
def test_the_wheel_installs_offline_and_its_doctor_answers(wheel, pasted, tmp_path, installer, version):
    python = python_or_skip(version)
    home = tmp_path / "home"
    home.mkdir()
    doctor = _installed(installer, python, wheel, home)
    env = _offline_env(home)
    said = subprocess.run([*doctor, "--version"], env=env, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert (said.returncode, said.stdout) == (0, f"wslpin-doctor {__version__}\n"), said.stderr
    asked = [*doctor, "--collect-env", str(pasted), "--vllm", "0.33.0"]
    done = subprocess.run(asked, env=env, cwd=tmp_path, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "cell       cuda-wsl2new-v2-graph, vLLM 0.33.0 (--vllm)" in done.stdout


def test_the_installed_doctor_on_python_3_7_names_the_python_it_needs(wheel, tmp_path):
    python = python_or_skip("3.7")
    subprocess.run([python, "-m", "venv", str(tmp_path / "venv")], check=True)
    # pip refuses the wheel on 3.7 (Requires-Python); a person may still force it, or copy the package over.
    pip = [str(tmp_path / "venv" / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-index"]
    forced = subprocess.run([*pip, "--ignore-requires-python", str(wheel)], capture_output=True, text=True, check=False)
    assert forced.returncode == 0, forced.stderr
    done = run_doctor(tmp_path / "venv" / "bin" / "wslpin-doctor", "--version", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("error: the kit needs Python 3.8 or later") and len(done.stderr.splitlines()) == 1


def run_doctor(doctor: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The console script as a user runs it: away from any checkout, no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(doctor), *args], capture_output=True, text=True, cwd=cwd, env=env, check=False)


def test_the_installed_doctor_and_its_wheel_say_the_kits_version(doctor, wheel, tmp_path):
    done = run_doctor(doctor, "--version", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, f"wslpin-doctor {__version__}\n"), done.stderr
    assert wheel.name.startswith(f"vllm_wslpin_kit-{__version__}-")


@pytest.fixture()
def pasted(tmp_path) -> Path:
    """A user's collect-env output: every answer below is for it, never for the machine the test runs on."""
    path = tmp_path / "collect-env.txt"
    path.write_text(COLLECT_ENV)
    return path


def test_the_installed_doctor_answers_from_the_matrix_it_carries_and_says_its_date(doctor, pasted, tmp_path):
    done = run_doctor(doctor, "--collect-env", str(pasted), "--vllm", "0.33.0", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    made = json.loads(COMPAT.read_text())["generated_at"][:10]
    assert f"matrix     the matrix this kit carries, made {made}" in done.stdout
    assert "cell       cuda-wsl2new-v2-graph, vLLM 0.33.0 (--vllm)" in done.stdout


def test_the_installed_doctor_answers_for_a_pasted_collect_env(doctor, pasted, tmp_path):
    done = run_doctor(doctor, "--collect-env", str(pasted), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"set-up     vLLM's collect-env output {pasted}, another machine's"
    assert f"kernel     {WSL2_KERNEL}: WSL2 kernel ≥ 4.19.121 (uname there)" in lines
    assert "vLLM       0.30.0 installed there" in lines
    # What the answers below are for depends on the matrix carried (made before it said the opted-in ones, or after).
    assert any(line.startswith("VLLM_WSL2_ENABLE_PIN_MEMORY=1 is set there: the opt-in, ") for line in lines)
    assert "cell       cuda-wsl2new-v2-graph, vLLM 0.30.0 (installed)" in lines


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that stops reading (the doctor, refusing): nothing for the test to see


@pytest.fixture()
def server() -> Iterator[str]:
    """A loopback HTTP server: /compat.json the published matrix, /big more than a small limit, /slow nothing for a
    while; gzip: /packed the matrix sent with Content-Encoding gzip (as a host compresses on the fly, when asked),
    /compat.json.gz the matrix as a gzip file, /bomb 64 MiB of zeros packed into 64 KiB, /broken a gzip answer cut
    in half; anything else 404."""
    body = COMPAT.read_bytes()
    packed = gzip.compress(body)
    payloads = {
        "/compat.json": (body, ""),
        "/big": (b"x" * 4096, ""),
        "/packed": (packed, "gzip"),
        "/compat.json.gz": (packed, ""),
        "/bomb": (gzip.compress(bytes(64 << 20)), "gzip"),
        "/broken": (packed[: len(packed) // 2], "gzip"),
    }

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/slow":
                time.sleep(3)
            payload, encoding = payloads.get(self.path, (None, ""))
            if payload is None:
                self.send_error(404)
                return
            if encoding and "gzip" not in self.headers.get("Accept-Encoding", ""):
                payload, encoding = gzip.decompress(payload), ""
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            if encoding:
                self.send_header("Content-Encoding", encoding)
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    with on_loopback(_Server(("127.0.0.1", 0), Handler)) as url:
        yield url


def test_the_installed_doctor_reads_a_newer_matrix_from_a_url(doctor, server, pasted, tmp_path):
    url = f"{server}/compat.json"
    done = run_doctor(doctor, "--matrix", url, "--collect-env", str(pasted), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"matrix     --matrix {url}, made " in done.stdout
    gone = run_doctor(doctor, "--matrix", f"{server}/nothing", "--collect-env", str(pasted), cwd=tmp_path)
    assert gone.returncode == 2 and gone.stderr.startswith(f"error: --matrix {server}/nothing: the server answered 404")
    assert len(gone.stderr.splitlines()) == 1


def test_a_url_is_read_within_its_size_and_its_time_or_refused_in_one_line(server):
    with pytest.raises(MatrixError, match="it sent more than"):
        remote.fetch(f"{server}/big", limit=1024)
    with pytest.raises(MatrixError, match="no answer within 0.5 s"):
        remote.fetch(f"{server}/slow", timeout=0.5)
    with pytest.raises(MatrixError, match="cannot be reached"):
        remote.fetch("http://127.0.0.1:9/compat.json")  # the discard port: nothing listens
    assert remote.fetch(f"{server}/compat.json") == COMPAT.read_bytes()


def test_a_gzip_matrix_is_unpacked_and_a_gzip_bomb_refused_in_one_line(doctor, server, pasted, tmp_path):
    for path in ("/packed", "/compat.json.gz"):
        assert remote.fetch(f"{server}{path}") == COMPAT.read_bytes()
        done = run_doctor(doctor, "--matrix", f"{server}{path}", "--collect-env", str(pasted), cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    bomb = run_doctor(doctor, "--matrix", f"{server}/bomb", "--collect-env", str(pasted), cwd=tmp_path)
    assert bomb.returncode == 2 and bomb.stderr.startswith(
        f"error: --matrix {server}/bomb: its gzip answer unpacks to more than the 32 MiB a matrix may be"
    )
    assert len(bomb.stderr.splitlines()) == 1
    with pytest.raises(MatrixError, match="its gzip answer is cut short"):
        remote.fetch(f"{server}/broken")


# What a server that does not speak HTTP, or speaks it too slowly, sends: each must end in one line.
RAW_ANSWERS = {
    "/version": b"HTTP/9.9 999 Whatever\r\n\r\n",
    "/garbage": b"SSH-2.0-OpenSSH_9.6\r\n",
    "/short": b'HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n{"schema":',
    "/header": b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n",
    "/chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nnot a chunk\r\n",
}


@pytest.fixture()
def raw_server() -> Iterator[str]:
    """A loopback TCP server that answers each path's bytes of RAW_ANSWERS, and /trickle with a valid answer sent
    one byte every 0.2 s (never slow enough for one read's timeout)."""

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            request = self.request.recv(65536).decode("latin-1")
            path = request.split(" ")[1] if " " in request else ""
            try:
                if path == "/trickle":
                    for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 1000:
                        self.request.sendall(bytes([byte]))
                        time.sleep(0.2)
                else:
                    self.request.sendall(RAW_ANSWERS.get(path, b""))
                    self.request.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # the doctor gave up first: what the test wants

    class Server(socketserver.ThreadingTCPServer):
        daemon_threads = True
        allow_reuse_address = True

    with on_loopback(Server(("127.0.0.1", 0), Handler)) as url:
        yield url


@pytest.mark.parametrize("path", sorted(RAW_ANSWERS))
def test_an_answer_that_is_not_http_is_refused_in_one_line(raw_server, path):
    with pytest.raises(MatrixError) as refused:
        remote.fetch(f"{raw_server}{path}", timeout=5)
    said = str(refused.value)
    assert said.startswith(f"--matrix {raw_server}{path}: ") and "\n" not in said


def test_a_server_that_trickles_is_cut_off_at_the_deadline_for_the_whole_answer(raw_server):
    # Each byte comes well within a read's timeout; all of them would take about 200 s.
    with pytest.raises(MatrixError, match="the whole answer did not arrive within 1 s"):
        remote.fetch(f"{raw_server}/trickle", timeout=5, deadline=1)


def test_another_machines_environment_record_is_answered_for_as_written(tmp_path):
    there = HostFacts(
        uname={"system": "Linux", "release": WSL2_KERNEL, "node": "runner"},
        environ={"WSL_DISTRO_NAME": "Ubuntu", "VLLM_USE_V2_MODEL_RUNNER": "0"},
        wsl_interop=True,
        dev_dxg=True,
        nvidia_gpus=(Gpu("NVIDIA GeForce RTX 4090", "576.88"),),
        torch={"version": "2.9.0", "cuda": "12.8", "hip": None},
        vllm={"version": "0.31.0", "commit": None, "requires_torch": "==2.9.0", "source": None},
    )
    record = tmp_path / "env.json"
    record.write_text(json.dumps(environment_record(there)))
    read = collected.read_set_up(record)
    assert read.origin == f"the environment record {record}, another machine's"
    assert (read.facts.uname["release"], read.facts.nvidia_gpus, read.facts.vllm) == (
        WSL2_KERNEL,
        there.nvidia_gpus,
        there.vllm,
    )
    assert read.facts.environ["VLLM_USE_V2_MODEL_RUNNER"] == "0" and read.facts.wsl_interop


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("hello\n", "names no Linux kernel"),
        ('{"schema": "something else"}', "is not an environment record"),
        ('{"schema": ' * 100_000, "cannot be read"),
    ],
)
def test_a_file_that_describes_no_machine_is_refused_in_one_line(tmp_path, content, said):
    pasted = tmp_path / "pasted"
    pasted.write_text(content)
    with pytest.raises(MatrixError, match=said) as refused:
        collected.read_set_up(pasted)
    assert "\n" not in str(refused.value)


def test_a_reader_that_leaves_early_ends_the_doctor_quietly(pasted):
    """`python -m matrix doctor | head -1`: the pipe closes before the answer is printed. Block-buffered, as a
    person's Python writes to a pipe (without PYTHONUNBUFFERED, which CI sets): the write fails only at a flush."""
    doctor = subprocess.Popen(
        [sys.executable, "-m", "matrix", "doctor", "--collect-env", str(pasted)],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert doctor.stdout is not None and doctor.stderr is not None
    doctor.stdout.close()
    error = doctor.stderr.read().decode()
    assert doctor.wait() == 141 and error == ""
