"""The questions a user asks of a set-up, and the words their answers use (compat.json's vocabulary).

Standard library only: the report writes these words (matrix.judge.verdicts decides them) and the
doctor, which runs on a bare Python, reads them back.
"""

from __future__ import annotations

from matrix.cells import Axis, ModelClass


class Question(Axis):
    """What a person asks of a set-up, in the order the answer gives them."""

    ENGINE_START = "engine_start"
    OFFLOAD_WITH_GRAPHS = "offload_with_graphs"
    PINNED_MEMORY = "pinned_memory"


class Verdict(Axis):
    """A question's answer for a cell."""

    WORKS = "works"
    NEEDS_OPT_IN = "needs-opt-in"  # only with VLLM_WSL2_ENABLE_PIN_MEMORY=1
    NEEDS_WSL_UPDATE = "needs-wsl-update"  # a kernel below 4.19.121: the variable cannot help
    BROKEN = "broken"  # fails whatever the variable says
    IGNORED = "ignored"  # accepted, but does nothing
    SLOW = "slow"  # works through pageable copies every step
    UNKNOWN = "unknown"  # no evidence


# How the doctor and the report name a model class.
MODEL_CLASS_WORDS = {ModelClass.DENSE: "a dense model", ModelClass.MOE: "an MoE model"}


class Level(Axis):
    """How a verdict is known, weakest first."""

    NONE = "none"
    DOCUMENTED = "documented"  # a vendor's documented requirement: nothing was run
    PREDICTED = "predicted"  # vLLM's own decisions under a presented host, no GPU
    # A user's own run, sent as a bundle (matrix.store.bundle): checked for consistency, not verified by the kit's
    # runners, so never above a result of theirs.
    COMMUNITY = "community"
    EMULATED = "emulated"  # a GPU on native Linux, the uname presented as the cell's host
    NATIVE = "native"  # a run on the cell's host
