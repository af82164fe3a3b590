"""Engine-config tests: the installed vLLM accepts the reproduction's engine in each cell, without a GPU.

vLLM builds the engine config from the exact keyword arguments and environment of the engine child
(``repro.engine``) under the cell's host, and loads the tiny model's tokenizer; nothing touches a
device (repro/engine_config.py). Run in every release's history, this is where a renamed keyword,
a dropped attention backend or a model the release no longer reads shows, before any GPU does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from matrix.cells import Mode, ModelClass
from matrix.judge.expectations import (
    ENGINE_CONFIG,
    PIN_CAP_WARNING,
    REFUSED,
    RUNNER_BY_ARCHITECTURE,
    V2_ARCHITECTURES,
    default_runner_key,
)
from repro import engine_config
from repro.failures import exception_text, torch_at_fault
from repro.tinymodel import CONFIG, tiny_model, tiny_moe


@pytest.fixture(scope="session")
def engine_configs(request, plans, vllm_version):
    """Every selected cell's answer, from one child per stack and host (none without vLLM)."""
    if vllm_version is None:
        return {}
    cache = Path(request.config.getoption("--model-cache"))
    return engine_config.evaluate(engine_config.requests_for(plans.values(), tiny_model(cache), tiny_moe(cache)))


def _answer(engine_configs, cell, vllm_version, no_answer) -> dict:
    if vllm_version is None:
        pytest.fail("vLLM is not installed in this environment: run the cell through nox, which installs it")
    outcome = engine_configs[cell]
    if not outcome.ok:
        no_answer(outcome, "this host")
    if "import_error" in outcome.value:
        reason = exception_text(outcome.value["import_error"])
        pytest.skip(f"vLLM does not import under this host: see test_vllm_imports ({reason})")
    return outcome.value


def _plain(value: object) -> object:
    """An enum member's name as the config prints it (``AttentionBackendEnum.TRITON_ATTN``), anything else as is."""
    return value.rpartition(".")[2] if isinstance(value, str) else value


def _refused(what: str, error: str, vllm_version: str, torch_pin: str | None, tag) -> None:
    last = exception_text(error)
    if torch_pin and torch_at_fault(error):
        tag("failure_kind", "torch-mismatch")
        pytest.skip(f"torch mismatch: vLLM {vllm_version} asks for {torch_pin}, and {what} failed in torch: {last}")
    pytest.fail(f"vLLM {vllm_version} refused {what}: {last}\n{error}")


def test_engine_config_builds(expect, tag, engine_configs, cell, vllm_version, torch_pin, no_answer):
    """vLLM builds the engine config from the reproduction's own arguments and the cell's environment, and it says
    what they asked; or refuses them where a rule expects it (0.34.0 stops on VLLM_USE_V2_MODEL_RUNNER=0)."""
    answer = _answer(engine_configs, cell, vllm_version, no_answer)
    config = answer["config"]
    if "error" in config:
        if torch_pin and torch_at_fault(config["error"]):
            _refused("the reproduction's engine arguments", config["error"], vllm_version, torch_pin, tag)
        tag("engine_config_error", exception_text(config["error"]))
        expect(ENGINE_CONFIG, REFUSED, "\n" + config["error"])
        return
    expect(ENGINE_CONFIG, "built")
    settings = config["settings"]
    tag("engine_settings", json.dumps(settings, sort_keys=True))
    # What the reproduction rests on; a release without a setting in its config is not judged on it.
    wanted = {"cpu_offload_gb": 1, "enforce_eager": cell.mode is Mode.EAGER, "attention_backend": "TRITON_ATTN"}
    differ = {
        key: (settings[key], value)
        for key, value in wanted.items()
        if key in settings and _plain(settings[key]) != value
    }
    assert not differ, f"vLLM {vllm_version}'s engine config differs from the arguments (built, asked): {differ}"
    if "loader_error" in answer:
        _refused("to import its model loader under this host", answer["loader_error"], vllm_version, torch_pin, tag)


def test_tokenizer_loads(tag, engine_configs, cell, vllm_version, torch_pin, no_answer):
    """vLLM loads the tiny model's tokenizer: the model's vocabulary, and text that comes back as it went in."""
    answer = _answer(engine_configs, cell, vllm_version, no_answer)
    if "tokenizer_error" in answer:
        _refused("the tiny model's tokenizer", answer["tokenizer_error"], vllm_version, torch_pin, tag)
    assert answer["vocab_size"] == CONFIG["vocab_size"], (
        f"vLLM's tokenizer has {answer['vocab_size']} tokens, the tiny model {CONFIG['vocab_size']}"
    )
    assert answer["round_trip"] == engine_config.ROUND_TRIP


@pytest.mark.parametrize("model_class", list(ModelClass))
def test_runner_default(expect, tag, engine_configs, cell, model_class, vllm_version, torch_pin, no_answer):
    """The runner vLLM picks with VLLM_USE_V2_MODEL_RUNNER unset, for the reproduction's engine with a dense model
    and with an MoE one: what a user who sets nothing gets (before 0.29.0 MoE models stayed on V1)."""
    answer = _answer(engine_configs, cell, vllm_version, no_answer)
    default = answer["runner_default"][model_class.value]
    if "error" in default:
        _refused(f"the engine config of its {model_class} model", default["error"], vllm_version, torch_pin, tag)
    expect(default_runner_key(model_class), default["runner"])


def test_v2_architectures(expect, tag, engine_configs, cell, vllm_version, no_answer):
    """The architectures vLLM's config gives the V2 runner by default under the cell's platform: up to 0.28.0 the
    model's architecture decides (DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES, per platform from 0.27.0)."""
    found = _answer(engine_configs, cell, vllm_version, no_answer)["by_architecture"]
    expect(V2_ARCHITECTURES, ",".join(found["listed"]) if found else "none")


def test_runner_by_architecture(expect, tag, engine_configs, cell, vllm_version, no_answer):
    """Which runner vLLM's config gives by default to an architecture on its V2 list and to one off it, MoE and
    dense, asked of the release's own decision function under the cell's platform. Where MoE-ness changes the
    answer, which architectures vLLM reads as MoE and as dense (from each one's default config) is recorded
    beside it, in the cells on native Linux (the reading does not depend on the host)."""
    found = _answer(engine_configs, cell, vllm_version, no_answer)["by_architecture"]
    if "moe" in found:
        tag("moe_architectures", json.dumps(found["moe"]))
        tag("dense_architectures", json.dumps(found["dense"]))
        # The reading is checked on the two families the kit's tiny models have the shapes of: a reading that
        # found no experts anywhere would make every MoE model dense.
        assert "MixtralForCausalLM" in found["moe"] and "LlamaForCausalLM" in found["dense"], found
    expect(RUNNER_BY_ARCHITECTURE, ",".join(f"{k}={v}" for k, v in found["runner"].items()) if found else "none")


def test_pin_cap_warning(expect, tag, engine_configs, cell, pin_env, vllm_version, torch_pin, no_answer):
    """Whether vLLM warns, as it builds the engine config, that Windows caps pinned memory (WDDM): what a user of
    CPU offload with CUDA graphs on WSL2 is told at start. Taken from vLLM's log under the cell's host, per value
    of the variable."""
    answer = _answer(engine_configs, cell, vllm_version, no_answer)
    if "error" in answer["config"]:
        pytest.skip("vLLM built no engine config for this cell: test_engine_config_builds says why")
    warnings = answer["warnings"][pin_env]
    tag("warnings", json.dumps(warnings))
    expect(PIN_CAP_WARNING, any("WDDM" in warning for warning in warnings))
