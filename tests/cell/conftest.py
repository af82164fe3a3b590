"""The tests a cell session runs: ``pytest tests/cell --cells PATTERN``.

Every test case carries a ``cell`` property (JUnit family xunit1), which
``python -m matrix split`` uses to write one file per cell, and the ``execution``
its cell was run as, from the session's plan (``--plan plan.json``, the file the
split reads too). Without ``--plan`` (pytest run by hand) the plan is made once here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from importlib import metadata
from pathlib import Path
from typing import NoReturn

import pytest

from matrix.case_facts import CaseFacts, spelled
from matrix.cells import Cell, select
from matrix.commands.here import detected_plan
from matrix.errors import MatrixError
from matrix.host import classify, facts
from matrix.host.edges import KERNEL_EDGES
from matrix.judge.expectations import CONFIG_KEYS, GATE_KEYS, REPRO_KEYS, expected_values, load_rules
from matrix.plan import CellPlan, load_plan
from matrix.variables import GATE_PIN_VALUES
from repro import engine_config, gate, offload
from repro.isolation import DEADLINE_CUT, NOT_STARTED, Outcome

BUILD = Path(__file__).resolve().parents[2] / "build"

# "imports" has a test of its own: without it no other value exists.
GATE_VALUE_KEYS = [key for key in GATE_KEYS if key != "imports"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "only_hosts(*hosts): generate the test only for cells of these hosts")
    _plans(config)  # here, so that a bad --cells or --plan is pytest's one-line usage error


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("wslpin-kit")
    group.addoption("--cells", default=None, help="cell ids or globs (default: all 24, or all the plan holds)")
    group.addoption("--plan", default=None, help="the session's plan.json (`python -m matrix plan --out`)")
    group.addoption("--gate-timeout", type=float, default=gate.DEFAULT_TIMEOUT, help="seconds per gate evaluation")
    group.addoption("--repro-timeout", type=float, default=offload.DEFAULT_TIMEOUT, help="seconds per engine run")
    group.addoption("--repro-jobs", type=int, default=4, help="engines at a time on the one GPU")
    group.addoption("--probe-out", help="write the probe's metrics JSON here")
    group.addoption("--model-cache", default=str(BUILD), help="where the tiny model is built and reused")


PLANS = pytest.StashKey[dict[Cell, CellPlan]]()


def _plans(config: pytest.Config) -> dict[Cell, CellPlan]:
    if PLANS not in config.stash:
        pattern, path = config.getoption("--cells"), config.getoption("--plan")
        try:
            plan = load_plan(Path(path)) if path else detected_plan(select(pattern))
            config.stash[PLANS] = {p.cell: p for p in plan.select(pattern)}
        except MatrixError as exc:
            raise pytest.UsageError(str(exc)) from None
    return config.stash[PLANS]


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
def torch_pin() -> str | None:
    """vLLM's own torch requirement when the installed torch is outside it (a gate's CPU torch), else None."""
    torch, vllm = facts.torch_info(), facts.vllm_info()
    return (
        f"torch{vllm['requires_torch']} (installed: {torch['version']})"
        if classify.torch_mismatch(torch, vllm)
        else None
    )


@pytest.fixture(scope="session")
def rules():
    return load_rules()


class _OnFirstLookUp(Mapping):
    """A mapping computed when first read: a fixture's value that costs nothing where no test reads it."""

    def __init__(self, compute: Callable[[], Mapping]) -> None:
        self._compute = compute

    @functools.cached_property
    def _values(self) -> Mapping:
        return self._compute()

    def __getitem__(self, key: object) -> object:
        return self._values[key]

    def __iter__(self) -> Iterator:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


@pytest.fixture(scope="session")
def gate_outcomes(request, plans):
    """vLLM's answers for every (stack, host, pin_env) the selected cells need, computed once, when first read.

    The reproduction reads them only where an engine offloaded something: without a GPU, no gate child starts.
    """
    requests = gate.requests_for(list(plans.values()))
    return _OnFirstLookUp(lambda: gate.evaluate(requests, timeout=request.config.getoption("--gate-timeout")))


@pytest.fixture(scope="session")
def edge_outcomes(request, plans):
    """vLLM's answers under every kernel edge, one child per stack, computed when first read."""
    requests = gate.edge_requests_for(plans.values())
    return _OnFirstLookUp(lambda: gate.evaluate_edges(requests, timeout=request.config.getoption("--gate-timeout")))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "cell" not in metafunc.fixturenames:
        return
    plans = _plans(metafunc.config)
    names = [n for n in ("cell", "kernel_edge", "pin_env", "gate_key") if n in metafunc.fixturenames]
    only = metafunc.definition.get_closest_marker("only_hosts")
    keys = gate.EDGE_KEYS if "kernel_edge" in names else GATE_VALUE_KEYS
    cases = []
    for cell in plans:
        if only is not None and cell.host not in only.args:
            continue
        # An edge belongs to the cells of the host the kit makes of its uname.
        for edge in [e for e in KERNEL_EDGES if e.host is cell.host] if "kernel_edge" in names else (None,):
            for pin_env in GATE_PIN_VALUES if "pin_env" in names else (None,):
                for key in keys if "gate_key" in names else (None,):
                    if key == "v2_buffer" and cell.runner.value != "v2":
                        continue  # the V1 runner has no UVA buffers
                    values = [v for v in (cell, edge, pin_env, key) if v is not None]
                    shown = (cell.id, edge and f"edge={edge.name}", pin_env and f"pin_env={pin_env}", key)
                    cases.append(pytest.param(*values, id="-".join(part for part in shown if part)))
    metafunc.parametrize(names, cases)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A test limited to some hosts (only_hosts) has no case in a session without
    # such cells; pytest would still list it once, as an empty parameter set.
    empty = [i for i in items if hasattr(i, "callspec") and not isinstance(i.callspec.params.get("cell"), Cell)]
    if empty:
        config.hook.pytest_deselected(items=empty)
        items[:] = [i for i in items if i not in empty]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    # A case judged on a child the run's deadline cut short (repro/isolation.py) did not run to its
    # end: it is skipped with that reason, never a failure of vLLM's nor a known failure reproduced.
    report = yield
    if call.when == "call" and (report.failed or hasattr(report, "wasxfail")) and DEADLINE_CUT in report.longreprtext:
        what = "was not started before" if NOT_STARTED in report.longreprtext else "was stopped at"
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, f"not run: what it needs {what} {DEADLINE_CUT}")
        if hasattr(report, "wasxfail"):
            del report.wasxfail
    return report


@pytest.fixture
def state(record_property) -> Callable[..., None]:
    """``state(gate_key=..., observed=...)``: the case states these facts, as matrix.case_facts writes them."""

    def write(**facts: str | None) -> None:
        for name, value in CaseFacts(**facts).to_properties().items():
            record_property(name, value)

    return write


@pytest.fixture
def no_answer(state) -> Callable[[Outcome, str], NoReturn]:
    """``no_answer(outcome, under)``: vLLM's child gave no answer under ``under``; the case fails, stating
    whether the child ran out of time (a run the history never keeps: the machine's load, not vLLM's)."""

    def fail(outcome: Outcome, under: str) -> NoReturn:
        state(timed_out=spelled(True) if outcome.timed_out else None)
        pytest.fail(f"no answer from vLLM under {under} ({outcome.status}): {outcome.detail}\n{outcome.log}")

    return fail


@pytest.fixture
def tag(request, record_property, state, cell, plans):
    """Stamp the case with its cell, so the split puts it in that cell's file; then ``tag(name, value)`` records
    one of the case's details (a timing, a metric) as it is."""
    state(cell=cell.id, pin_env=request.node.callspec.params.get("pin_env"), execution=plans[cell].execution.value)
    return record_property


@pytest.fixture
def expect(request, tag, state, rules, cell, vllm_version):
    """Check an observed value against its rule in expectations.toml; a known failure becomes a strict xfail."""
    pin_env = request.node.callspec.params.get("pin_env")
    if pin_env is None:  # an engine-config test: its facts are asked with the variable unset
        pin_env = engine_config.PIN_ENV
        state(pin_env=pin_env)

    def check(key: str, observed, context: str = "") -> None:
        state(gate_key=key, observed=spelled(observed))
        expected = expected_values(rules, cell, vllm_version, pin_env).get(key)
        if expected is None:
            pytest.fail(
                f"no rule in matrix/judge/expectations.toml covers {key} for {cell} with vLLM {vllm_version}, "
                f"pin_env={pin_env}; vLLM decided {observed!r}: add a rule"
            )
        state(expected=spelled(expected.value), rule=expected.rule.id, issue=expected.known_issue)
        if expected.known_issue:
            request.applymarker(
                pytest.mark.xfail(
                    strict=True,
                    reason=f"known failure {expected.known_issue} (rule {expected.rule.id}); "
                    "if this passes the issue is fixed: update the rule",
                )
            )
        meaning = GATE_KEYS.get(key) or CONFIG_KEYS.get(key) or REPRO_KEYS[key]
        assert observed == expected.value, (
            f"{meaning}: vLLM {vllm_version} gave {observed!r} but rule {expected.rule.id!r} "
            f"expects {expected.value!r} ({expected.rule.note}){context}"
        )

    return check
