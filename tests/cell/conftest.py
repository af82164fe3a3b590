"""The tests a cell session runs: ``pytest tests/cell --cells PATTERN``.

Every test case carries a ``cell`` property (JUnit family xunit1), which
``python -m matrix split`` uses to write one file per cell.
"""

from __future__ import annotations

from importlib import metadata

import pytest

from matrix import hostinfo
from matrix.cells import MatrixError, select
from matrix.expectations import GATE_KEYS, load_rules
from matrix.plan import plan_cells
from repro import gate

# "imports" has a test of its own: without it no other value exists.
GATE_VALUE_KEYS = [key for key in GATE_KEYS if key != "imports"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("wslpin-kit")
    group.addoption("--cells", default=None, help="cell ids or globs (default: all 24)")
    group.addoption(
        "--gate-timeout",
        type=float,
        default=gate.DEFAULT_TIMEOUT,
        help="seconds before a gate evaluation child is killed",
    )


def _plans(config: pytest.Config):
    if not hasattr(config, "_wslpin_plans"):
        try:
            cells = select(config.getoption("--cells"))
        except MatrixError as exc:
            raise pytest.UsageError(str(exc)) from None
        here = hostinfo.detect(hostinfo.collect_facts())
        config._wslpin_plans = {p.cell: p for p in plan_cells(cells, here)}
    return config._wslpin_plans


@pytest.fixture(scope="session")
def plans(request):
    return _plans(request.config)


@pytest.fixture(scope="session")
def vllm_version() -> str | None:
    try:
        return metadata.version("vllm")
    except metadata.PackageNotFoundError:
        return None


@pytest.fixture(scope="session")
def rules():
    return load_rules()


@pytest.fixture(scope="session")
def gate_outcomes(request, plans):
    """vLLM's answers for every (stack, host, pin_env) the selected cells need, computed once."""
    requests = [
        gate.GateRequest.for_cell(cell, pin_env, plan.execution)
        for cell, plan in plans.items()
        for pin_env in ("unset", "1")
    ]
    return gate.evaluate(requests, timeout=request.config.getoption("--gate-timeout"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "cell" not in metafunc.fixturenames:
        return
    plans = _plans(metafunc.config)
    names = [n for n in ("cell", "pin_env", "gate_key") if n in metafunc.fixturenames]
    cases = []
    for cell in plans:
        for pin_env in ("unset", "1") if "pin_env" in names else (None,):
            for key in GATE_VALUE_KEYS if "gate_key" in names else (None,):
                if key == "v2_buffer" and cell.runner.value != "v2":
                    continue  # the V1 runner has no UVA buffers
                values = [v for v in (cell, pin_env, key) if v is not None]
                ident = "-".join([cell.id] + [f"pin_env={pin_env}"] * (pin_env is not None) + [key] * (key is not None))
                cases.append(pytest.param(*values, id=ident))
    metafunc.parametrize(names, cases)


@pytest.fixture
def tag(request, record_property, cell, plans):
    """Stamp the case with its cell, so the split puts it in that cell's file."""
    record_property("cell", cell.id)
    pin_env = request.node.callspec.params.get("pin_env")
    if pin_env is not None:
        record_property("pin_env", pin_env)
    record_property("execution", plans[cell].execution.value)
    return record_property
