"""What a night of 24 cells adds to the evidence store (matrix.store.evidence), in the tree and in git.

Real cells' records are made from the committed history's results of the newest release, each written as
the store writes a native run's record. Night 1 is 24 new records; each of nights 2-31 is 24 records that
differ from the night before only slightly (its date: what a driver or kernel update that changes no answer
also does). A night with the same answers as a record kept adds nothing, by the store's digest. Run with the
kit's Python (the report's extra): ``.nox/tests/bin/python tools/measure_store.py``.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from matrix.envelope import Envelope  # noqa: E402
from matrix.junit import (  # noqa: E402
    parse,
    record_file,  # noqa: E402
    suites,
)
from matrix.releases import VLLM_VERSION  # noqa: E402
from matrix.store.history_archive import read_committed  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
NIGHTS = 31


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=m", "-c", "user.email=m@m", *args], check=True)


def night(history: Path, repo: Path, day: int) -> tuple[int, int]:
    """Night ``day``'s 24 records into ``repo``, committed: their bytes, and the bytes zlib makes of them."""
    raw = compressed = 0
    for path in sorted(history.glob("*.xml")):
        (suite,), _ = suites(parse(path))
        props = dict(suite.props, execution="native", started_at=f"2026-12-{day:02d}T03:17:00+00:00")
        data = record_file(Envelope.from_properties(props), suite.cases)
        (repo / f"{path.stem}-{day:02d}.xml").write_bytes(data)
        raw, compressed = raw + len(data), compressed + len(zlib.compress(data))
    git(repo, "add", ".")
    git(repo, "commit", "--quiet", "-m", f"night {day}")
    return raw, compressed


def packed(repo: Path) -> int:
    git(repo, "gc", "--quiet", "--aggressive")
    return sum(p.stat().st_size for p in (repo / ".git" / "objects" / "pack").glob("*.pack"))


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="wslpin-store-") as scratch:
        history, repo = Path(scratch) / "history", Path(scratch) / "repo"
        for name, data in read_committed(ROOT / "docs" / "evidence" / "history.tar.xz")[VLLM_VERSION].items():
            (history / VLLM_VERSION).mkdir(parents=True, exist_ok=True)
            (history / VLLM_VERSION / name).write_bytes(data)
        git(Path(scratch), "init", "--quiet", str(repo))
        raw, compressed = night(history / VLLM_VERSION, repo, 1)
        first = packed(repo)
        for day in range(2, NIGHTS + 1):
            night(history / VLLM_VERSION, repo, day)
        last = packed(repo)
    print(f"a night of 24 new records (vLLM {VLLM_VERSION}): {raw:,} bytes in the tree, {compressed:,} compressed")
    print(f"packed by git: {first:,} bytes after night 1, {last:,} after night {NIGHTS}: ", end="")
    print(f"{(last - first) / (NIGHTS - 1):,.0f} bytes per night of slightly changed records")


if __name__ == "__main__":
    main()
