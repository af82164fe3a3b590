"""What the kit's two rule files share: which cells and releases a rule holds for, how a file is read, which rule wins.

``expectations.toml`` (what vLLM should decide) and ``verdicts.toml`` (what a user gets from what it decided)
are each an ordered list of ``[[rule]]`` tables. In both, the first rule that matches wins: exceptions come
first, the general rules after them. A rule's cells, releases, runner and graph mode are a ``Selector``, read
and checked here once for both files.
"""

from __future__ import annotations

import fnmatch
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from matrix.cells import CELLS, Cell, Mode, Runner
from matrix.errors import MatrixError

SELECTOR_FIELDS = ("cells", "vllm", "runner", "mode")


@dataclass(frozen=True)
class Selector:
    """The cells (globs over their ids), vLLM releases (PEP 440), runner and graph mode a rule holds for."""

    cells: tuple[str, ...] = ("*",)
    vllm: SpecifierSet | None = None  # None: every release
    runner: Runner | None = None
    mode: Mode | None = None

    def covers(self, version: Version | None) -> bool:
        """Whether the rule's range holds ``version``: a release packaging cannot order is in no named range."""
        return self.vllm is None or (version is not None and self.vllm.contains(version, prereleases=True))

    def holds_for(self, cell: Cell, version: Version | None) -> bool:
        return (
            any(fnmatch.fnmatchcase(cell.id, pattern) for pattern in self.cells)
            and self.runner in (None, cell.runner)
            and self.mode in (None, cell.mode)
            and self.covers(version)
        )


@dataclass(frozen=True)
class Table:
    """One ``[[rule]]`` of a file, with the words that name it in an error."""

    where: str  # "rule 'wsl-no-pin' in expectations.toml"
    fields: Mapping[str, Any]

    def error(self, what: str) -> MatrixError:
        return MatrixError(f"{self.where}: {what}")

    def selector(self) -> Selector:
        cells = self.fields.get("cells", "*")
        cells = (cells,) if isinstance(cells, str) else tuple(cells)
        if not cells or not all(isinstance(p, str) and any(fnmatch.fnmatchcase(c.id, p) for c in CELLS) for p in cells):
            raise self.error(f"cells {list(cells)} match no cell")
        try:
            vllm = SpecifierSet(self.fields["vllm"]) if "vllm" in self.fields else None
        except InvalidSpecifier:
            raise self.error(f"bad vllm range {self.fields['vllm']!r}") from None
        try:
            runner = Runner.parse(self.fields["runner"]) if "runner" in self.fields else None
            mode = Mode.parse(self.fields["mode"]) if "mode" in self.fields else None
        except MatrixError as exc:
            raise self.error(str(exc)) from None
        return Selector(cells, vllm, runner, mode)


def load_tables(path: Path, fields: Iterable[str]) -> list[Table]:
    """The file's rules in order, each with only ``fields`` (and the selector's); a file that cannot be read as
    rules is one error naming what to mend."""
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise MatrixError(f"{path} is not valid TOML: {exc}") from None
    allowed = {"id", *SELECTOR_FIELDS, *fields}
    tables = []
    for index, fields_of in enumerate(data.get("rule", [])):
        table = Table(f"rule {fields_of.get('id', index + 1)!r} in {path.name}", fields_of)
        unknown = set(fields_of) - allowed
        if unknown:
            raise table.error(f"unknown field(s) {sorted(unknown)}")
        tables.append(table)
    return tables
