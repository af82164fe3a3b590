"""This machine as read now, and the plan for it: what a command run by hand uses, without a session's plan.json.

The plan is a decision over a host as described (matrix.plan); reading the machine (its GPU tools, /proc, the torch
this interpreter sees) happens here. Two readings need not agree (a GPU tool that times out once), so a session
reads it once, into its environment record, and plans from that (``Plan.from_record``).
"""

from __future__ import annotations

from collections.abc import Iterable

from matrix.cells import Cell
from matrix.host.classify import detect
from matrix.host.facts import collect_facts
from matrix.plan import Plan


def detected_plan(cells: Iterable[Cell], require_native: bool = False) -> Plan:
    """The plan for this machine as detected now."""
    return Plan.for_host(cells, detect(collect_facts()), require_native=require_native)
