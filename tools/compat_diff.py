"""Compare two compat.json documents: does the new report publish what the old one did?

    python3 tools/compat_diff.py [--ignore KEY]... OLD NEW

Ignores what depends on when and by which kit the report was generated (the
top-level ``generated_at`` and ``kit_commit``, each cell's ``age_days``), any
key only NEW has (fields a newer kit adds), and each ``--ignore`` key wherever it
is (a field whose words a newer kit changed on purpose). Prints each difference as
``JSON path: old -> new`` and exits 1 if there is any, 0 if none, 2 if a file
cannot be read. Standard library only: it runs before any environment exists.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

# Top-level only: a cell's provenance also names a kit_commit, the one its runner ran, and that must agree.
IGNORED = frozenset({"$.generated_at", "$.kit_commit"})
# Counted from the moment the report is generated, like generated_at.
IGNORED_ANYWHERE = frozenset({"age_days"})


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


def main(argv: list[str]) -> int:
    ignored = set(IGNORED_ANYWHERE)
    while len(argv) > 2 and argv[0] == "--ignore":
        ignored.add(argv[1])
        argv = argv[2:]
    if len(argv) != 2:
        print("usage: python3 tools/compat_diff.py [--ignore KEY]... OLD NEW", file=sys.stderr)
        return 2
    documents = []
    for name in argv:
        try:
            with open(name, encoding="utf-8") as f:
                documents.append(json.load(f))
        except (OSError, ValueError) as exc:
            print(f"error: {name} cannot be read as JSON: {exc}", file=sys.stderr)
            return 2
    found = 0
    for path, old, new in differences(*documents, ignored=frozenset(ignored)):
        found += 1
        print(f"{path}: {json.dumps(old, ensure_ascii=False)} -> {json.dumps(new, ensure_ascii=False)}")
    print(f"{found} difference(s) between {argv[0]} and {argv[1]}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
