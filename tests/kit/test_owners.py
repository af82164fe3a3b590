"""One owner per fact: what several modules need is defined in one and imported by the others (issue 25)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from conftest import ROOT

from matrix import variables

VARIABLE = re.compile(r"(?:VLLM|WSLPIN)_[A-Z0-9_]+")
# The start-up hook every Python process of a bench runs: it reads its variable before the kit is importable.
BEFORE_THE_KIT = {"repro/bench/present_host/sitecustomize.py"}


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


def test_every_variable_the_kit_names_is_in_the_registry_and_named_nowhere_else():
    registry = Path(variables.__file__).resolve()
    elsewhere = []
    for path in kit_sources():
        if path.resolve() == registry or str(path.relative_to(ROOT)) in BEFORE_THE_KIT:
            continue
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and VARIABLE.fullmatch(node.value):
                elsewhere.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value}")
    assert not elsewhere, f"a variable named outside matrix/variables.py (add it there and import it): {elsewhere}"
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
    allowed |= {"matrix/judge/verdicts.py": {"'issue'"}, "matrix/judge/expectations.py": {"'issue'"}}
    allowed |= {"matrix/commands/annotations.py": {"'rule'", "'issue'"}, "matrix/judge/rules.py": {"'rule'"}}
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


def test_matrix_has_at_most_twenty_entries_at_its_top():
    """Modules and packages a newcomer reads first (issue 44): more belong in a package that names what they do."""
    entries = sorted(p.name for p in (ROOT / "matrix").iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file())
    assert len(entries) <= 20, f"{len(entries)} entries at the top of matrix/: {entries}"


def unit(module: str) -> str:
    """What a module belongs to for the layering: its package below matrix/, or itself at the top."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else module


def test_no_package_climbs_back_into_itself():
    """A package's module that imports a module which imports that package again is a cycle in disguise (the
    report's model through the evidence store back into the report's reader): between packages and the modules at
    the top of matrix/, imports go one way. ``python -m matrix`` itself, the entry, imports every command."""
    graph: dict[str, set[str]] = {}
    for module, found in kit_imports().items():
        if module == "matrix.__main__":
            continue
        graph.setdefault(unit(module), set()).update(unit(f) for f in found if unit(f) != unit(module))
    climbs = []
    for start in sorted(graph):
        seen, stack = {start}, [(start, [start])]
        while stack:
            node, path = stack.pop()
            for found in sorted(graph.get(node, ())):
                if found == start:
                    climbs.append(" -> ".join([*path, start]))
                elif found not in seen:
                    seen.add(found)
                    stack.append((found, [*path, found]))
    assert not climbs, "\n".join(climbs)


# Where results are kept and read from (matrix/store/) sits below what reads them: the report, the doctor, the
# commands and CI's helpers. The report reads the store; the store never the report.
ABOVE_THE_STORE = ("matrix.report", "matrix.commands", "matrix.doctor", "matrix.ci")


def test_the_store_never_imports_what_reads_it():
    wrong = sorted(
        f"{module} -> {found}"
        for module, imports in kit_imports().items()
        if module.startswith("matrix.store")
        for found in imports
        if found.startswith(ABOVE_THE_STORE)
    )
    assert not wrong, wrong


# What parses or writes XML text; matrix/junit.py is the one module that may (and junitparser, which the kit's own
# tests use to read what the kit wrote, is imported by no module of the kit's but there).
XML_TEXT = {"parse", "fromstring", "tostring", "tostringlist", "iterparse", "XMLParser", "XMLPullParser"}


def test_junit_is_parsed_and_written_in_its_own_module_only():
    readers = []
    for path in kit_sources():
        name = str(path.relative_to(ROOT))
        if name == "matrix/junit.py":
            continue
        for node in ast.walk(ast.parse(path.read_bytes(), filename=name)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(("xml", "defusedxml", "lxml")):
                found = {alias.name for alias in node.names} & XML_TEXT
            elif isinstance(node, ast.Import | ast.ImportFrom):
                modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                found = {m for m in modules if m.startswith(("junitparser", "defusedxml", "lxml"))}
            else:
                continue
            if found:
                readers.append(f"{name}:{node.lineno}: {sorted(found)}")
    # The split imports the safe parser first only to say at once, on a bare Python, that it is missing.
    assert readers == ["matrix/__main__.py:" + str(_split_check_line()) + ": ['defusedxml.ElementTree']"], readers


def _split_check_line() -> int:
    source = (ROOT / "matrix" / "__main__.py").read_text().splitlines()
    return next(n for n, line in enumerate(source, 1) if line.strip().startswith("import defusedxml"))


def test_the_python_38_list_is_what_runs_on_a_bare_python():
    """`python -m matrix doctor`, `env` and `plan` run on the system Python (3.8+): exactly the modules they import
    are kept to 3.8 by ruff (pyproject.toml's per-file target), so none is missed and none held back for nothing."""
    import tomllib

    from matrix.store.history_key import key_files

    closure = {name for name in key_files(ROOT, [], ("doctor", "env", "plan")) if name.endswith(".py")}
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["per-file-target-version"]
    py38 = {str(p.relative_to(ROOT)) for pattern, v in listed.items() if v == "py38" for p in ROOT.glob(pattern)}
    # docs/matrix.py is no module of the kit's: what `python3 -m matrix` finds when run from docs/ by mistake.
    assert py38 - {"docs/matrix.py"} == closure, (
        f"listed, not imported: {sorted(py38 - closure - {'docs/matrix.py'})}; imported, not listed: "
        f"{sorted(closure - py38)}"
    )
