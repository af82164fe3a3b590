"""Where the sessions' torch comes from (tools/installs.py): the CPU build wherever no GPU runs the cells, from a
wheel directory first, a mirror of PyTorch's CPU index next, else PyTorch's own through uv; the choices asked of the
real uv, offline (a wheel directory holding the CPU torch, as this kit's CI keeps one, or a loopback mirror of it)."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import on_loopback
from nox.command import CommandFailed

from tools.installs import TORCH_INDEX, UNREACHABLE, Installer, cpu_torch, install_torch

TORCH = "torch==2.13.0"
CPU_BACKEND = ("--torch-backend", "cpu")


@pytest.mark.parametrize(
    ("environ", "uv", "options", "cpu"),
    [
        ({}, True, CPU_BACKEND, True),
        # A wheel directory wins over everything: the offline machine's CPU torch.
        ({"UV_FIND_LINKS": "/w", TORCH_INDEX: "http://m/cpu", "UV_TORCH_BACKEND": "cu128"}, True, (), True),
        ({"PIP_FIND_LINKS": "/w"}, True, CPU_BACKEND, True),  # pip's directory is not uv's
        ({TORCH_INDEX: "http://m/cpu", "UV_TORCH_BACKEND": "cu128"}, True, ("--index", "http://m/cpu"), True),
        ({"UV_TORCH_BACKEND": "cu128"}, True, (), True),  # the user's own backend, read by uv itself
        ({"PIP_FIND_LINKS": "/w", TORCH_INDEX: "http://m/cpu"}, False, (), True),
        ({TORCH_INDEX: "http://m/cpu"}, False, ("--extra-index-url", "http://m/cpu"), True),
        ({"UV_TORCH_BACKEND": "cpu"}, False, (), False),  # uv's variable, which pip never reads
    ],
)
def test_torch_comes_from_the_first_source_of_its_cpu_build_that_is_set(environ, uv, options, cpu):
    source = cpu_torch(environ, uv)
    assert (source.options, source.cpu) == (options, cpu)


def test_pip_with_no_wheel_directory_or_mirror_is_warned_of_cudas_torch():
    source = cpu_torch({}, uv=False)
    assert not source.cpu and source.options == ()
    assert "CUDA's build" in source.said and TORCH_INDEX in source.said and "PIP_FIND_LINKS" in source.said


class _Said:
    """What a nox session logs and warns, kept (the two methods install_torch uses)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def log(self, line: str) -> None:
        self.lines.append(("log", line))

    def warn(self, line: str) -> None:
        self.lines.append(("warn", line))


def test_the_session_installs_torch_with_the_options_and_says_where_it_comes_from(monkeypatch):
    for name in ("UV_FIND_LINKS", "UV_TORCH_BACKEND", TORCH_INDEX):
        monkeypatch.delenv(name, raising=False)
    commands: list[tuple[str, ...]] = []
    said = _Said()
    install_torch(said, Installer(lambda *args: commands.append(args), uv=True), TORCH)  # type: ignore[arg-type]
    assert commands == [(*CPU_BACKEND, TORCH)]
    assert said.lines == [("log", "torch's CPU build from PyTorch's CPU index (uv's backend)")]
    monkeypatch.setenv("UV_FIND_LINKS", "/wheels")
    install_torch(said, Installer(lambda *args: commands.append(args), uv=True), TORCH)  # type: ignore[arg-type]
    assert commands[-1] == (TORCH,) and said.lines[-1][1].endswith("UV_FIND_LINKS names (/wheels)")


def test_where_pytorchs_index_cannot_be_reached_torch_comes_from_the_package_index(monkeypatch):
    """A network that lets the package index through but not PyTorch's: the session warns and goes on. (The
    installer stands in for uv, which fails so where the index's address does not resolve, as on this kit's CI.)"""
    for name in ("UV_FIND_LINKS", "UV_TORCH_BACKEND", TORCH_INDEX):
        monkeypatch.delenv(name, raising=False)
    commands: list[tuple[str, ...]] = []

    def unreachable(*args: str) -> None:
        commands.append(args)
        if "--torch-backend" in args:
            raise CommandFailed("dns error")

    said = _Said()
    install_torch(said, Installer(unreachable, uv=True), TORCH)  # type: ignore[arg-type]
    assert commands == [(*CPU_BACKEND, TORCH), (TORCH,)]
    assert said.lines[-1] == ("warn", UNREACHABLE)
    # A mirror the user named is not second-guessed: its failure is the session's.
    monkeypatch.setenv(TORCH_INDEX, "http://mirror/cpu")
    with pytest.raises(CommandFailed):
        install_torch(said, Installer(lambda *args: unreachable("--torch-backend", *args), uv=True), TORCH)  # type: ignore[arg-type]


def _uv() -> str:
    found = shutil.which("uv")
    if found is None:
        pytest.skip("no uv on PATH (`pip install uv`)")
    return found


def _local_cpu_torch() -> Path:
    """The CPU torch wheel of the wheel directory UV_FIND_LINKS names (this kit's CI keeps one), or a skip."""
    links = os.environ.get("UV_FIND_LINKS", "")
    wheels = sorted(Path(links).glob("torch-2.13.0+cpu-*.whl")) if links and Path(links).is_dir() else []
    if not wheels:
        pytest.skip(f"UV_FIND_LINKS ({links or 'unset'}) names no directory holding torch 2.13.0's CPU wheel")
    return wheels[0]


def _dry_run(options: tuple[str, ...], env: dict[str, str], tmp_path: Path, *flags: str) -> str:
    """What the real uv would install for ``torch==2.13.0`` alone into a fresh venv, with ``options``, offline."""
    uv = _uv()
    subprocess.run([uv, "venv", "--quiet", str(tmp_path / "venv")], check=True, env=env)
    command = [uv, *flags, "pip", "install", "--python", str(tmp_path / "venv"), "--dry-run", "--no-deps"]
    done = subprocess.run([*command, *options, TORCH], env=env, capture_output=True, text=True, timeout=120)
    return done.stdout + done.stderr


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """No installer configuration of this machine but ``extra``; an empty cache, no network (UV_OFFLINE)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))}
    return {**env, "UV_CACHE_DIR": str(tmp_path / "cache"), "UV_OFFLINE": "1", **extra}


def test_a_wheel_directory_gives_the_cpu_torch_offline(tmp_path):
    links = str(_local_cpu_torch().parent)
    source = cpu_torch({"UV_FIND_LINKS": links}, uv=True)
    said = _dry_run(source.options, _env(tmp_path, UV_FIND_LINKS=links), tmp_path)
    assert "+ torch==2.13.0+cpu" in said, said


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def test_a_mirror_of_the_cpu_index_is_searched_before_the_package_index(tmp_path):
    wheel = _local_cpu_torch()
    project = tmp_path / "mirror" / "torch"
    project.mkdir(parents=True)
    (project / wheel.name).symlink_to(wheel)
    link = wheel.name.replace("+", "%2B")
    (project / "index.html").write_text(f'<!DOCTYPE html><html><body><a href="{link}">{wheel.name}</a></body></html>')
    handler = functools.partial(_Quiet, directory=str(tmp_path / "mirror"))
    with on_loopback(http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)) as url:
        source = cpu_torch({TORCH_INDEX: url}, uv=True)
        env = {k: v for k, v in _env(tmp_path).items() if k != "UV_OFFLINE"}  # the mirror is on loopback
        said = _dry_run(source.options, env, tmp_path)
    assert "+ torch==2.13.0+cpu" in said, said


def test_without_a_wheel_directory_uv_asks_pytorchs_cpu_index_for_torch(tmp_path):
    # Offline, uv says which index it would ask (-v) and then stops: the CPU one, never the package index's torch.
    said = _dry_run(cpu_torch({}, uv=True).options, _env(tmp_path), tmp_path, "-v")
    assert "/whl/cpu/torch/" in said and "/simple/torch/" not in said, said
