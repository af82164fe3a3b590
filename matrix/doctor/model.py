"""The model a person asks about, from its directory's config.json (``--model DIR``): its architecture, and whether
vLLM's model class for it is MoE.

Read as untrusted input (bounded, refused in one line), as ``collected`` reads another machine's set-up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from matrix.errors import MatrixError
from matrix.io.bounded_json import parse
from matrix.io.files import InputFileError, read_input

# The keys vLLM reads a model's expert count from (its CONFIG_FIELD_ALIASES["num_experts"], 0.33.0's
# transformers_utils/config.py): Jamba, Dbrx, DeepSeek, Mixtral. More than 0 experts: an MoE model.
EXPERT_KEYS = ("num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts")
AGAIN = "give the directory of a Hugging Face model, which holds its config.json, or pass --arch NAME"


# A NamedTuple, not a dataclass: made at every start of the doctor, whose budget is 2x a bare Python's start.
class Model(NamedTuple):
    architecture: str  # the config's first `architectures` entry, the one vLLM resolves the model class from
    moe: bool


def _experts(config: dict[str, Any]) -> int:
    # vLLM reads the text model's config: a multimodal model's experts sit in its text_config.
    text = config.get("text_config")
    for where in (config, text if isinstance(text, dict) else {}):
        for key in EXPERT_KEYS:
            value = where.get(key)
            value = value[0] if isinstance(value, list) and value else value
            if isinstance(value, int) and not isinstance(value, bool) and value:
                return value
    return 0


def read_model(directory: Path) -> Model:
    """The model in ``directory``, or one line saying why its config.json names none."""
    name = f"--model {directory}"
    try:
        config = parse(read_input(directory / "config.json", limit=4 << 20))
    except InputFileError as exc:
        raise MatrixError(f"{name}: its config.json is {exc}: {AGAIN}") from None
    except MatrixError as exc:
        raise MatrixError(f"{name}: its config.json cannot be read ({exc}): {AGAIN}") from None
    architectures = config.get("architectures") if isinstance(config, dict) else None
    if not isinstance(architectures, list) or not architectures or not isinstance(architectures[0], str):
        raise MatrixError(f"{name}: its config.json lists no architectures: {AGAIN}")
    return Model(architectures[0], _experts(config) > 0)
