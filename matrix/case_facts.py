"""What a cell's test case states beside its outcome, as JUnit properties: written and read through here only.

A case names the cell it belongs to (the split files it by that), the value of VLLM_WSL2_ENABLE_PIN_MEMORY it ran
under and how the cell ran; where it compares one of vLLM's decisions with its rule, what vLLM decided, what the
rule expects, the rule, and the upstream issue of a known failure; the kernel edge whose uname it ran under
(tests/cell/test_kernel_edges.py), where it did; and that a vLLM child ran out of time, where one did. Any other
property of a case (timings, metrics, engine settings) is a detail, shown as it is.

Every value is a string, as JUnit holds it. A decided or expected value is spelled as Python prints it (``True``,
``pageable-copy``): what verdicts.toml's globs match. The suite's envelope keeps the lower-case booleans every kit
version has written there (matrix/envelope.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import NamedTuple


class Decision(NamedTuple):
    """One of vLLM's decisions a case compared with its rule."""

    key: str  # a gate key (matrix/judge/expectations.py), or "runner"
    pin_env: str
    observed: str


@dataclass(frozen=True)
class CaseFacts:
    """A case's facts; None where the case does not state one. The fields' order is the order they are written."""

    cell: str | None = None
    pin_env: str | None = None
    execution: str | None = None
    gate_key: str | None = None
    observed: str | None = None
    expected: str | None = None
    rule: str | None = None
    issue: str | None = None
    kernel_edge: str | None = None
    # A vLLM child gave no answer because it ran out of time (repro/isolation.py's Outcome.timed_out): the
    # machine's load, not the inputs', so the history never keeps such a run (matrix.store.history).
    timed_out: str | None = None

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> CaseFacts:
        return cls(**{name: properties[name] for name in _NAMES if name in properties})

    def to_properties(self) -> dict[str, str]:
        """The facts the case states, by their property names."""
        return {name: value for name in _NAMES for value in (getattr(self, name),) if value is not None}

    @property
    def decision(self) -> Decision | None:
        """What vLLM decided, where the case compared it with a rule (under the cell's host or a kernel edge's)."""
        if self.gate_key is None or self.pin_env is None or self.observed is None:
            return None
        return Decision(self.gate_key, self.pin_env, self.observed)

    @property
    def decision_under_the_cells_host(self) -> Decision | None:
        """``decision``, unless it was made under a kernel edge's uname rather than the cell's host."""
        return None if self.kernel_edge is not None else self.decision


# How long a case's vLLM children took (details, not facts): the machine's load, so volatile by nature.
TIMINGS = frozenset({"gate_seconds", "engine_seconds", "probe_seconds"})

_NAMES = tuple(field.name for field in fields(CaseFacts))


def spelled(value: object) -> str:
    """A decided or expected value as a case states it."""
    return str(value)
