"""What each cell should do: rules from ``expectations.toml``, resolved per cell.

A rule names cells (globs), a vLLM version range (PEP 440), optionally one
``pin_env`` value, and expected gate values. For each value the first matching
rule in the file wins (matrix.judge.rules), so exceptions come first and general rules after them.
A rule with ``issue`` is a known failure: its values say what vLLM *should*
decide, and the test is expected to fail until that issue is fixed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from matrix.cells import Cell, ModelClass
from matrix.judge.rules import Selector, Table, load_tables
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
RUNNER = "runner"
ENGINE_CONFIG = "engine_config"
V2_ARCHITECTURES = "v2_architectures"
RUNNER_BY_ARCHITECTURE = "runner_by_architecture"
# What ENGINE_CONFIG and RUNNER say where vLLM refused: the engine does not start.
REFUSED = "refused"
CONFIG_KEYS = {
    default_runner_key(kind): f"the runner vLLM picks with VLLM_USE_V2_MODEL_RUNNER unset, for a {kind} model (v1, v2)"
    for kind in ModelClass
} | {
    PIN_CAP_WARNING: "vLLM warned, building the engine config, that Windows (WDDM) caps pinned memory "
    "(taken from vLLM's log, not read)",
    RUNNER: "the model runner vLLM's config picks under the cell's VLLM_USE_V2_MODEL_RUNNER (v1, v2; refused: vLLM "
    "stops the engine on that value)",
    ENGINE_CONFIG: "vLLM builds the engine config from the reproduction's arguments and the cell's environment "
    "(built, refused)",
    V2_ARCHITECTURES: "the architectures vLLM's config gives the V2 runner by default on the cell's platform "
    "(DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES; none: the release decides alike for every architecture)",
    RUNNER_BY_ARCHITECTURE: "the default runner per class of architecture (on that list or off it, MoE or dense), "
    "asked of vLLM's _is_default_v2_model_runner_model (none: no such decision in the release)",
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
    selector: Selector
    pin_env: str | None
    expect: dict[str, object]
    issue: str | None = None
    note: str = ""

    def matches(self, cell: Cell, version: Version | None, pin_env: str) -> bool:
        return self.selector.holds_for(cell, version) and self.pin_env in (None, pin_env)


@dataclass(frozen=True)
class Expected:
    value: object
    rule: Rule

    @property
    def known_issue(self) -> str | None:
        return self.rule.issue


def _rule(index: int, table: Table) -> Rule:
    pin_env = table.fields.get("pin_env")
    if pin_env not in (None, *GATE_PIN_VALUES):
        raise table.error(f"pin_env must be one of {GATE_PIN_VALUES}")
    expect = dict(table.fields.get("expect", {}))
    bad = set(expect) - set(GATE_KEYS) - set(REPRO_KEYS) - set(CONFIG_KEYS)
    if bad or not expect:
        known = sorted(GATE_KEYS | REPRO_KEYS | CONFIG_KEYS)
        raise table.error(f"expect needs keys from {known}, got {sorted(expect)}")
    return Rule(
        id=str(table.fields.get("id", index + 1)),
        selector=table.selector(),
        pin_env=pin_env,
        expect=expect,
        issue=table.fields.get("issue"),
        note=table.fields.get("note", ""),
    )


def load_rules(path: Path = EXPECTATIONS_FILE) -> list[Rule]:
    return [_rule(i, table) for i, table in enumerate(load_tables(path, ("pin_env", "expect", "issue", "note")))]


def release_version(text: str) -> Version | None:
    """The release an input names, or None where packaging cannot order it."""
    try:
        return Version(text)
    except ValueError:  # InvalidVersion, or a number too long for int(): Python refuses over 4300 digits
        return None


def expected_values(rules: list[Rule], cell: Cell, vllm_version: str, pin_env: str) -> dict[str, Expected]:
    """Per value, what the first rule that matches says (matrix.judge.rules: exceptions first)."""
    version = release_version(vllm_version)
    resolved: dict[str, Expected] = {}
    for rule in rules:
        if rule.matches(cell, version, pin_env):
            for key, value in rule.expect.items():
                resolved.setdefault(key, Expected(value, rule))
    return resolved
