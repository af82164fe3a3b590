"""The README's commands for a fresh machine, run where none of this machine's state is visible.

``nox -s clean_machine`` runs them in a container of Debian bookworm made here with
debootstrap, holding what a newcomer's machine has before the kit (python3 with its venv
module, git, CA certificates), a fresh clone of the kit's committed HEAD, a new HOME and
empty caches. The container shares the host's network, because the package index must be
reachable as the README says, and the host's CA bundle, because this machine's egress may
re-sign TLS. Nothing else of the host: no pip or uv configuration, no local wheels, no cache.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path

PACKAGES = ("python3", "python3-venv", "git", "ca-certificates")
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
HOME = "/root"
SECTION = "## On a fresh machine"


class ReadmeError(ValueError):
    """The README has no fresh-machine commands to run."""


def readme_commands(readme: str) -> list[str]:
    """The commands of the README's fresh-machine ``console`` block: prompts and comments dropped."""
    _, found, section = readme.partition(SECTION)
    block = re.search(r"```console\n(.*?)```", section, re.DOTALL)
    if not found or block is None:
        raise ReadmeError(f"README.md has no ```console block under {SECTION!r}")
    commands = [re.sub(r"\s+#.*$", "", line[2:]).strip() for line in block.group(1).splitlines() if line[:2] == "$ "]
    if not commands:
        raise ReadmeError(f"the console block under {SECTION!r} has no `$ ` command")
    return commands


def script(commands: list[str]) -> str:
    """One bash script: the commands in the kit's clone, in order, each timed; the first failure stops it."""
    lines = ["set -eo pipefail", 'cd "$HOME/kit"']
    for command in commands:
        lines += [
            f"echo {shlex.quote(f'[clean machine] $ {command}')}",
            "started=$SECONDS",
            command,
            f'echo "[clean machine] $((SECONDS - started)) s: "{shlex.quote(command)}',
        ]
    return "\n".join(lines) + "\n"


def fresh_clone(repo: Path, into: Path, run: Callable[..., object]) -> None:
    """What is committed, as a newcomer's ``git clone`` gets it: no build output, no venv, no result."""
    run("git", "clone", "--quiet", "--no-local", str(repo), str(into))


def docker_run(docker_host: str, image: str, home: Path, commands: list[str]) -> list[str]:
    """Write the script into ``home`` (which holds ``kit/``); the ``docker run`` that runs it there as HOME."""
    (home / "clean-machine.sh").write_text(script(commands))
    argv = ["docker", "--host", docker_host, "run", "--rm", "--network", "host", "-v", f"{home}:{HOME}"]
    argv += ["-e", f"HOME={HOME}"]
    if CA_BUNDLE.exists():
        # pip trusts its own certifi copy and uv its built-in roots unless told to use this file.
        argv += ["-v", f"{CA_BUNDLE}:{CA_BUNDLE}:ro", "-e", f"PIP_CERT={CA_BUNDLE}", "-e", f"SSL_CERT_FILE={CA_BUNDLE}"]
    return [*argv, image, "bash", f"{HOME}/clean-machine.sh"]
