"""The README's commands for a fresh machine, run where none of this machine's state is visible.

``nox -s clean_machine`` runs them in a container of Debian bookworm made here with
debootstrap, holding what a newcomer's machine has before the kit (python3 with its venv
module, git, CA certificates), a fresh clone of the kit's committed HEAD, a new HOME and
empty caches. What they print where the README shows it (the main job's closing table) must be what
the README shows. The container shares the host's network, because the package index must be
reachable as the README says, and the host's CA bundle, because this machine's egress may
re-sign TLS. Nothing else of the host: no pip or uv configuration, no local wheels, no cache.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

from tools import readme as marked

PACKAGES = ("python3", "python3-venv", "git", "ca-certificates")
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
HOME = "/root"
SECTION = "## On a fresh machine"
# In the container's HOME: the standard output of each command the README shows an example of, by its index.
PRINTED = "printed"


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


def shown_examples(readme: str, commands: list[str]) -> dict[int, marked.Example]:
    """The README's marked examples (tools/readme.py) of its fresh-machine commands, by the command's index."""
    by_command = {example.command: example for example in marked.examples(readme)}
    return {index: by_command[command] for index, command in enumerate(commands) if command in by_command}


def script(commands: list[str], kept: Collection[int] = ()) -> str:
    """One bash script: the commands in the kit's clone, in order, each timed; the first failure stops it. The
    standard output of those at the indexes ``kept`` is also written to ``$HOME/printed/INDEX``: a marked example's
    command runs without a shell (tools/readme.py), so a pipe changes nothing it does."""
    lines = ["set -eo pipefail", 'cd "$HOME/kit"', f'mkdir -p "$HOME/{PRINTED}"']
    for index, command in enumerate(commands):
        lines += [
            f"echo {shlex.quote(f'[clean machine] $ {command}')}",
            "started=$SECONDS",
            f'{command} | tee "$HOME/{PRINTED}/{index}"' if index in kept else command,
            f'echo "[clean machine] $((SECONDS - started)) s: "{shlex.quote(command)}',
        ]
    return "\n".join(lines) + "\n"


def fresh_clone(repo: Path, into: Path, run: Callable[..., object]) -> None:
    """What is committed, as a newcomer's ``git clone`` gets it: no build output, no venv, no result."""
    run("git", "clone", "--quiet", "--no-local", str(repo), str(into))


def stale(shown: Mapping[int, marked.Example], home: Path) -> list[str]:
    """One line for each example the fresh machine printed otherwise than the README shows it (the script ran)."""
    found = []
    for index, example in shown.items():
        try:
            printed = example.shown((home / PRINTED / str(index)).read_text())
        except marked.ReadmeError as exc:
            found.append(f"README.md's example of `{example.command}` on a fresh machine: {exc}")
            continue
        if not marked.same(example.output, printed):
            found.append(
                f"README.md's example of `{example.command}` is not what a fresh machine printed (above): "
                "run `nox -s readme` and commit its change, or mend what a first run prints"
            )
    return found


def docker_run(docker_host: str, image: str, home: Path, commands: list[str], kept: Collection[int] = ()) -> list[str]:
    """Write the script into ``home`` (which holds ``kit/``); the ``docker run`` that runs it there as HOME."""
    (home / "clean-machine.sh").write_text(script(commands, kept))
    argv = ["docker", "--host", docker_host, "run", "--rm", "--network", "host", "-v", f"{home}:{HOME}"]
    argv += ["-e", f"HOME={HOME}"]
    if CA_BUNDLE.exists():
        # pip trusts its own certifi copy and uv its built-in roots unless told to use this file.
        argv += ["-v", f"{CA_BUNDLE}:{CA_BUNDLE}:ro", "-e", f"PIP_CERT={CA_BUNDLE}", "-e", f"SSL_CERT_FILE={CA_BUNDLE}"]
    return [*argv, image, "bash", f"{HOME}/clean-machine.sh"]
