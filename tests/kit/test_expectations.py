import pytest

from matrix.cells import CELLS, Cell
from matrix.errors import MatrixError
from matrix.judge.expectations import CONFIG_KEYS, GATE_KEYS, REPRO_KEYS, expected_values, load_rules
from matrix.variables import GATE_PIN_VALUES

RULES = load_rules()


@pytest.mark.parametrize("cell", CELLS, ids=str)
def test_every_value_of_every_cell_has_a_rule_for_the_pinned_vllm(cell):
    for pin_env in GATE_PIN_VALUES:
        assert set(expected_values(RULES, cell, "0.33.0", pin_env)) == set(GATE_KEYS) | set(REPRO_KEYS) | set(
            CONFIG_KEYS
        )


def test_later_rules_override_earlier_ones_per_value():
    unset = expected_values(RULES, Cell.parse("cuda-wsl2new-v2-graph"), "0.33.0", "unset")
    assert unset["pin"].value is False and unset["pin"].rule.id == "wsl-no-pin"
    assert unset["warning"].value == "none" and unset["warning"].rule.id == "cuda-new-kernel-opt-in-off"
    on = expected_values(RULES, Cell.parse("cuda-wsl2new-v2-graph"), "0.33.0", "1")
    assert on["pin"].value is True and on["v2_buffer"].value == "UvaBuffer"


def test_known_failures_carry_their_issue():
    rocm = expected_values(RULES, Cell.parse("rocm-wsl2new-v1-eager"), "0.33.0", "unset")
    assert rocm["pin"].known_issue.endswith("/49861")
    assert rocm["warning"].known_issue is None  # only the values the issue is about
    old = expected_values(RULES, Cell.parse("cuda-wsl2old-v2-graph"), "0.27.0", "unset")
    assert old["v2_buffer"].known_issue.endswith("/47387")
    assert (
        expected_values(RULES, Cell.parse("cuda-wsl2old-v2-graph"), "0.33.0", "unset")["v2_buffer"].known_issue is None
    )


def test_version_ranges_follow_the_releases():
    # Before #41496 (0.24.0) CUDA had no kernel gate: the base class's generic warning.
    assert expected_values(RULES, Cell.parse("cuda-wsl2old-v1-graph"), "0.23.0", "1")["warning"].value == "wsl"
    assert expected_values(RULES, Cell.parse("cuda-wsl2old-v1-graph"), "0.24.0", "1")["warning"].value == "wsl-kernel"
    assert expected_values(RULES, Cell.parse("cuda-wsl2old-v1-graph"), "0.25.1", "1")["imports"].known_issue
    # CUDA on a new kernel decides silently: no warning, so no circular import.
    assert not expected_values(RULES, Cell.parse("cuda-wsl2new-v1-graph"), "0.25.1", "1")["imports"].known_issue


@pytest.mark.parametrize(
    "body, says",
    [
        ('[[rule]]\ncells = "cuda-*"\nvllm = ">=0.1"\nexpect = { pin = true }\ncolour = "red"', "unknown field"),
        ('[[rule]]\ncells = "metal-*"\nvllm = ">=0.1"\nexpect = { pin = true }', "match no cell"),
        ('[[rule]]\ncells = "cuda-*"\nvllm = "about 0.3"\nexpect = { pin = true }', "bad vllm range"),
        ('[[rule]]\ncells = "cuda-*"\nvllm = ">=0.1"\nexpect = { pinned = true }', "expect needs keys"),
        ('[[rule]]\ncells = "cuda-*"\nvllm = ">=0.1"\npin_env = "0"\nexpect = { pin = true }', "pin_env"),
        ("[[rule]\n", "not valid TOML"),
    ],
)
def test_a_bad_rule_file_is_one_clear_error(tmp_path, body, says):
    path = tmp_path / "expectations.toml"
    path.write_text(body)
    with pytest.raises(MatrixError) as err:
        load_rules(path)
    assert says in str(err.value)


def test_per_value_the_first_matching_rule_wins_and_a_rule_may_name_a_runner(tmp_path):
    path = tmp_path / "expectations.toml"
    path.write_text(
        '[[rule]]\nid = "v2-exception"\ncells = "cuda-*"\nrunner = "v2"\nvllm = ">=0.30"\nexpect = { pin = false }\n'
        '[[rule]]\nid = "general"\ncells = "*"\nvllm = ">=0.20"\nexpect = { pin = true, uva = true }\n'
    )
    rules = load_rules(path)
    v2 = expected_values(rules, Cell.parse("cuda-linux-v2-graph"), "0.33.0", "unset")
    assert {k: (e.value, e.rule.id) for k, e in v2.items()} == {
        "pin": (False, "v2-exception"),
        "uva": (True, "general"),
    }
    for cell, vllm in (("cuda-linux-v1-graph", "0.33.0"), ("cuda-linux-v2-graph", "0.29.0")):
        assert expected_values(rules, Cell.parse(cell), vllm, "unset")["pin"].rule.id == "general"
    path.write_text('[[rule]]\ncells = "*"\nrunner = "v3"\nvllm = ">=0.20"\nexpect = { pin = true }\n')
    with pytest.raises(MatrixError, match=r"^rule 1 in expectations.toml: unknown runner 'v3'"):
        load_rules(path)
