"""What each cell should do: rules from ``expectations.toml``, resolved per cell.

A rule names cells (globs), a vLLM version range (PEP 440), optionally one
``pin_env`` value, and expected gate values. For each value the last matching
rule in the file wins, so general rules come first and exceptions after them.
A rule with ``issue`` is a known failure: its values say what vLLM *should*
decide, and the test is expected to fail until that issue is fixed.
"""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from matrix.cells import CELLS, Cell, ModelClass
from matrix.errors import MatrixError
from matrix.variables import GATE_PIN_VALUES

EXPECTATIONS_FILE = Path(__file__).with_name("expectations.toml")

# The gate values vLLM decides, as recorded by repro.gate; descriptions for people.
GATE_KEYS = {
    "imports": "vLLM and vllm.utils.torch_utils import under this host",
    "platform_pin": "is_pin_memory_available() of the cell's platform class",
    "pin": "module-level is_pin_memory_available()",
    "uva": "module-level is_uva_available()",
    "warning": "pin-memory warning logged (none, wsl, wsl-kernel)",
    "v2_buffer": "V2 runner buffer class (UvaBuffer, NonUvaBuffer, or the crash)",
    "offload_path": "CPU weight offload path (uva, pinned-copy, pageable-copy)",
    "v2_offloader": "the V2 runner's module calls create_offloader (read from the release's source, not run)",
}


def default_runner_key(model_class: ModelClass) -> str:
    return f"runner_default_{model_class.value}"


# What vLLM's engine config says for the reproduction's engine arguments (see repro/engine_config.py).
PIN_CAP_WARNING = "pin_cap_warning"
CONFIG_KEYS = {
    default_runner_key(kind): f"the runner vLLM picks with VLLM_USE_V2_MODEL_RUNNER unset, for a {kind} model (v1, v2)"
    for kind in ModelClass
} | {
    PIN_CAP_WARNING: "vLLM warned, building the engine config, that Windows (WDDM) caps pinned memory "
    "(taken from vLLM's log, not read)"
}
# What the offload-with-graph reproduction does on a GPU (see repro/offload.py).
REPRO_KEYS = {
    "repro": "the offloaded engine run: works, or its failure kind (repro/failures.py)",
    "offloaded": "parameters really left device memory with cpu_offload_gb=1",
    "minimal_repro": "the minimal form (native Linux, vLLM's switches that take UVA and pinned memory from "
    "the offloader): works, or its failure kind",
    "minimal_offload_path": "the path the minimal form's offloader took (pageable-copy; none: nothing offloaded)",
}


@dataclass(frozen=True)
class Rule:
    id: str
    cells: tuple[str, ...]
    vllm: SpecifierSet
    pin_env: str | None
    expect: dict[str, object]
    issue: str | None = None
    note: str = ""

    def covers(self, version: Version | None) -> bool:
        """Whether the rule's range holds ``version``: a release packaging cannot order is in no rule's range."""
        return version is not None and self.vllm.contains(version, prereleases=True)

    def matches(self, cell: Cell, version: Version | None, pin_env: str) -> bool:
        return (
            any(fnmatch.fnmatchcase(cell.id, pattern) for pattern in self.cells)
            and self.covers(version)
            and self.pin_env in (None, pin_env)
        )


@dataclass(frozen=True)
class Expected:
    value: object
    rule: Rule

    @property
    def known_issue(self) -> str | None:
        return self.rule.issue


def _rule_from_table(index: int, table: dict) -> Rule:
    where = f"rule {table.get('id', index + 1)!r}"
    unknown = set(table) - {"id", "cells", "vllm", "pin_env", "expect", "issue", "note"}
    if unknown:
        raise MatrixError(f"{where} in expectations.toml: unknown field(s) {sorted(unknown)}")
    cells = table.get("cells")
    cells = (cells,) if isinstance(cells, str) else tuple(cells or ())
    if not cells or not all(any(fnmatch.fnmatchcase(c.id, p) for c in CELLS) for p in cells):
        raise MatrixError(f"{where} in expectations.toml: cells {list(cells)} match no cell")
    try:
        spec = SpecifierSet(table.get("vllm", ""))
    except InvalidSpecifier:
        raise MatrixError(f"{where} in expectations.toml: bad vllm range {table['vllm']!r}") from None
    pin_env = table.get("pin_env")
    if pin_env not in (None, *GATE_PIN_VALUES):
        raise MatrixError(f"{where} in expectations.toml: pin_env must be one of {GATE_PIN_VALUES}")
    expect = dict(table.get("expect", {}))
    bad = set(expect) - set(GATE_KEYS) - set(REPRO_KEYS) - set(CONFIG_KEYS)
    if bad or not expect:
        raise MatrixError(
            f"{where} in expectations.toml: expect needs keys from {sorted(GATE_KEYS | REPRO_KEYS | CONFIG_KEYS)}, "
            f"got {sorted(expect)}"
        )
    return Rule(
        id=str(table.get("id", index + 1)),
        cells=cells,
        vllm=spec,
        pin_env=pin_env,
        expect=expect,
        issue=table.get("issue"),
        note=table.get("note", ""),
    )


def load_rules(path: Path = EXPECTATIONS_FILE) -> list[Rule]:
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise MatrixError(f"{path} is not valid TOML: {exc}") from None
    return [_rule_from_table(i, t) for i, t in enumerate(data.get("rule", []))]


def release_version(text: str) -> Version | None:
    """The release an input names, or None where packaging cannot order it."""
    try:
        return Version(text)
    except ValueError:  # InvalidVersion, or a number too long for int(): Python refuses over 4300 digits
        return None


def expected_values(rules: list[Rule], cell: Cell, vllm_version: str, pin_env: str) -> dict[str, Expected]:
    version = release_version(vllm_version)
    resolved: dict[str, Expected] = {}
    for rule in rules:
        if rule.matches(cell, version, pin_env):
            for key, value in rule.expect.items():
                resolved[key] = Expected(value, rule)
    return resolved
