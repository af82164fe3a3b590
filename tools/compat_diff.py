"""Compare two compat.json documents: does the new report publish what the old one did?

    python3 tools/compat_diff.py [--ignore KEY]... OLD NEW
    python3 tools/compat_diff.py --volatile COMMITTED PRODUCED

Each side is read whole: a compat.json of schema 2 with the case files it links beside it (cases/<release>.json,
each checked against its digest) joined in, which is what schema 1 held in one file, so either layout compares
with either (the matrix published before the cases moved out against the one published after).

Ignores what depends on when and by which kit the report was generated (the
top-level ``generated_at`` and ``kit_commit``, each cell's ``age_days``), any
key only NEW has (fields a newer kit adds), and each ``--ignore`` key wherever it
is (a field whose words a newer kit changed on purpose).

``--volatile`` compares two reports of the same kit exactly (is the committed matrix what the code
produces?): a key only one side has is a difference, and only what is volatile by nature is masked
(``VOLATILE_KEYS``, ``VOLATILE_TEXT``). Prints each difference as ``JSON path: old -> new``
and exits 1 if there is any, 0 if none, 2 if a file cannot be read. Standard library only (with the kit's own
modules): it runs before any environment exists.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

# This checkout's kit, wherever the tool is run from: its words for what is volatile, and its case files' reader.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from matrix.case_facts import TIMINGS  # noqa: E402
from matrix.envelope import MACHINE_NAMES, RUN_STAMP  # noqa: E402
from matrix.errors import MatrixError  # noqa: E402
from matrix.report.compat_cases import joined  # noqa: E402

# Top-level only: a cell's provenance also names a kit_commit, the one its runner ran, and that must agree.
IGNORED = frozenset({"$.generated_at", "$.kit_commit"})
# Counted from the moment the report is generated, like generated_at.
IGNORED_ANYWHERE = frozenset({"age_days"})
# --volatile: what differs between two runs of the same kit on the same results by nature, wherever it is:
# when the report was made (generated_at, age_days, date), each run's stamp and the machine's names of today
# (matrix.envelope), and a case's timings (matrix.case_facts).
VOLATILE_KEYS = frozenset({"generated_at", "age_days", "date"}) | RUN_STAMP | MACHINE_NAMES | TIMINGS
# Text that ends in the date of its evidence, e.g. "predicted: ... (gate-only) (2026-12-01)": only that date is masked.
VOLATILE_TEXT = {"evidence": re.compile(r" \(\d{4}-\d{2}-\d{2}\)$")}
# In any text, the directories of an absolute path: where the kit was cloned and its venvs made (a traceback's
# ".../.nox/releases/0.25.1/lib/python3.11/site-packages/vllm/utils/torch_utils.py"). The file's own name
# stays, and so does a URL's path (its slashes follow "://" or a word).
MACHINE_DIRECTORIES = re.compile(r"(?<![\w.:/])/(?:[\w.+-]+/)+")


def differences(
    old: object, new: object, path: str = "$", ignored: frozenset[str] = IGNORED_ANYWHERE
) -> Iterator[tuple[str, object, object]]:
    """(JSON path, old value, new value) of each place the documents disagree."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key, value in old.items():
            where = f"{path}.{key}"
            if where in IGNORED or key in ignored:
                continue
            if key not in new:
                yield where, value, "(absent)"
            else:
                yield from differences(value, new[key], where, ignored)
    elif isinstance(old, list) and isinstance(new, list):
        for index, (a, b) in enumerate(zip(old, new, strict=False)):
            yield from differences(a, b, f"{path}[{index}]", ignored)
        if len(old) != len(new):
            yield f"{path}.length", len(old), len(new)
    elif old != new or type(old) is not type(new):
        yield path, old, new


def masked(document: object, key: str = "") -> object:
    """``document`` with what is volatile by nature (--volatile) replaced by one placeholder."""
    if isinstance(document, dict):
        return {k: "(volatile)" if k in VOLATILE_KEYS else masked(v, k) for k, v in document.items()}
    if isinstance(document, list):
        return [masked(item, key) for item in document]
    if isinstance(document, str):
        if key in VOLATILE_TEXT:
            document = VOLATILE_TEXT[key].sub(" (date)", document)
        return MACHINE_DIRECTORIES.sub("(directory)/", document)
    return document


def exact_differences(old: object, new: object) -> Iterator[tuple[str, object, object]]:
    """--volatile: every difference of the masked documents, a key only NEW has included."""
    old, new = masked(old), masked(new)
    yield from differences(old, new, ignored=frozenset())
    # Both ways: the keys only NEW has, which the one-way walk above does not look for.
    for path, value, missing in differences(new, old, ignored=frozenset()):
        if missing == "(absent)":
            yield path, "(absent)", value


def main(argv: list[str]) -> int:
    ignored = set(IGNORED_ANYWHERE)
    volatile = argv[:1] == ["--volatile"]
    argv = argv[1:] if volatile else argv
    while len(argv) > 2 and argv[0] == "--ignore" and not volatile:
        ignored.add(argv[1])
        argv = argv[2:]
    if len(argv) != 2:
        print(
            "error: two reports to compare are needed: run python3 tools/compat_diff.py [--ignore KEY]... OLD NEW, "
            "or --volatile COMMITTED PRODUCED",
            file=sys.stderr,
        )
        return 2
    documents = []
    for name in argv:
        try:
            # Read here, not by the kit's reader of inputs, which takes regular files only: OLD is often a
            # pipe, `<(git show main:docs/matrix/compat.json)`.
            with open(name, encoding="utf-8") as f:
                document = json.load(f)
        except (OSError, ValueError) as exc:
            print(f"error: {name} cannot be read as JSON: {exc}", file=sys.stderr)
            return 2
        try:
            documents.append(joined(document, Path(name)))
        except MatrixError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    found = 0
    found_all = exact_differences(*documents) if volatile else differences(*documents, ignored=frozenset(ignored))
    for path, old, new in found_all:
        found += 1
        print(f"{path}: {json.dumps(old, ensure_ascii=False)} -> {json.dumps(new, ensure_ascii=False)}")
    print(f"{found} difference(s) between {argv[0]} and {argv[1]}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
