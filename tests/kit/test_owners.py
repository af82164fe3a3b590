"""One owner per fact: what several modules need is defined in one and imported by the others (issue 25)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from conftest import ROOT

from matrix import variables

VLLM_VARIABLE = re.compile(r"VLLM_[A-Z0-9_]+")


def kit_sources() -> list[Path]:
    """The kit's own code: its packages, the noxfile and the tools (not the tests, which may name anything)."""
    return sorted(
        [
            ROOT / "noxfile.py",
            *(ROOT / "tools").glob("*.py"),
            *(ROOT / "matrix").rglob("*.py"),
            *(ROOT / "repro").rglob("*.py"),
        ]
    )


def test_every_vllm_variable_the_kit_names_is_in_the_registry_and_named_nowhere_else():
    registry = Path(variables.__file__).resolve()
    elsewhere = []
    for path in kit_sources():
        if path.resolve() == registry:
            continue
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and VLLM_VARIABLE.fullmatch(node.value):
                elsewhere.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}")
    assert not elsewhere, "a vLLM variable named outside matrix/variables.py: add it there and import it"
    registered = {value.name for value in vars(variables).values() if isinstance(value, variables.Variable)}
    assert {"VLLM_CACHE_ROOT", "VLLM_NO_USAGE_STATS", "VLLM_HOST_IP", "WSLPIN_PRESENT_HOST"} <= registered


def names_in(path: Path) -> set[str]:
    """Every identifier a module uses (variables, attributes, imported names) and every string it holds, apart."""
    names, strings = set(), set()
    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.add(node.name)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            strings.add(f"'{node.value}'")
    return names | strings


# What marks a module that reads a record's raw form (a name, or a quoted string: the XML element's tag), and the
# modules that may: the record's own, and its writer.
RECORD_READERS = {
    "the plan (plan.json)": ("PLAN_SCHEMA", {"matrix/plan.py"}),
    "the environment record (env.json)": ("ENV_SCHEMA", {"matrix/host/classify.py", "matrix/host/record.py"}),
    "JUnit properties (a cell file's envelope, a case's facts)": ("'property'", {"matrix/junit.py"}),
}


@pytest.mark.parametrize("record", RECORD_READERS)
def test_each_records_raw_form_is_read_in_its_own_module_only(record):
    mark, owners = RECORD_READERS[record]
    readers = {str(path.relative_to(ROOT)) for path in kit_sources() if mark in names_in(path)}
    assert readers == owners, f"{record}: read through {sorted(owners)}, not parsed again in {sorted(readers - owners)}"


def test_a_cases_facts_are_named_only_by_their_record():
    """A case's facts (matrix/case_facts.py) are written by the cells' tests and read by the report through
    CaseFacts alone: no module spells their property names, so none can read or write them another way."""
    from matrix.case_facts import CaseFacts

    own = {"gate_key", "kernel_edge", "observed", "expected", "rule", "issue"} & set(CaseFacts.__dataclass_fields__)
    marks = {f"'{name}'" for name in own}
    # render_json's "expected", "observed", "rule" and "issue" are compat.json's fields (its schema), not properties.
    allowed = {"matrix/report/render_json.py": {"'expected'", "'observed'", "'rule'", "'issue'"}}
    allowed |= {"matrix/verdicts.py": {"'issue'"}, "matrix/expectations.py": {"'issue'"}}
    allowed |= {"matrix/report/annotations.py": {"'rule'", "'issue'"}, "matrix/rules.py": {"'rule'"}}
    # The cells' conftest parametrises tests by fixtures of those names (the gate key, the kernel edge).
    allowed |= {"tests/cell/conftest.py": {"'gate_key'", "'kernel_edge'"}}
    sources = [*kit_sources(), *sorted((ROOT / "tests" / "cell").glob("*.py"))]
    spelled = {}
    for path in sources:
        name = str(path.relative_to(ROOT))
        found = (marks & names_in(path)) - allowed.get(name, set())
        if found:
            spelled[name] = sorted(found)
    assert not spelled, f"a case's facts named outside matrix/case_facts.py: {spelled}"


def kit_imports() -> dict[str, set[str]]:
    """Each module of matrix/ and the kit's modules it imports, at the top or inside a function (both run)."""
    modules = {}
    for path in (ROOT / "matrix").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    imports: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                module = ".".join([*base, *([node.module] if node.module else [])])
                named = [module, *(f"{module}.{alias.name}" for alias in node.names)]
            elif isinstance(node, ast.Import):
                named = [alias.name for alias in node.names]
            else:
                continue
            imports[name] |= {found for found in named if found in modules and found != name}
    return imports


def test_no_module_of_matrix_imports_itself_back_through_another():
    """A cycle means two modules share what one should own (issue 44): the JUnit reader split between junit and the
    report's reader, the probe record inside the report's model, a command and the table it prints."""
    imports = kit_imports()
    cycles = []
    for start in sorted(imports):
        seen, stack = {start}, [(start, [start])]
        while stack:
            module, path = stack.pop()
            for found in sorted(imports[module]):
                if found == start:
                    cycles.append(" -> ".join([*path, start]))
                elif found not in seen:
                    seen.add(found)
                    stack.append((found, [*path, found]))
    assert not cycles, "\n".join(cycles)
