"""The tiny model the reproduction loads, checked with transformers on the CPU (no hub, no GPU)."""

import hashlib
import json

import pytest
from safetensors.numpy import load_file

from repro.tinymodel import BOS_ID, CONFIG, tensor_shapes, tiny_model


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model(tmp_path_factory.mktemp("cache"))


def digest(directory):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def test_config_is_a_two_layer_llama(model_dir):
    config = json.loads((model_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["num_hidden_layers"], config["vocab_size"]) == (2, 512)
    assert config["hidden_size"] == config["num_attention_heads"] * config["head_dim"]


def test_tensors_have_llama_names_and_shapes(model_dir):
    tensors = load_file(str(model_dir / "model.safetensors"))
    assert {name: t.shape for name, t in tensors.items()} == tensor_shapes()
    assert all(str(t.dtype) == "float16" for t in tensors.values())


def test_transformers_loads_it_and_generates_greedily(model_dir):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    assert AutoConfig.from_pretrained(model_dir).model_type == "llama"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    names = {name: tuple(p.shape) for name, p in model.named_parameters()}
    assert names == tensor_shapes()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompt = tokenizer("pinned memory on the host", return_tensors="pt")["input_ids"]
    first = model.generate(prompt, max_new_tokens=6, do_sample=False)
    again = model.generate(prompt, max_new_tokens=6, do_sample=False)
    assert first.shape == (1, prompt.shape[1] + 6) and torch.equal(first, again)


def test_tokenizer_round_trips_any_text(model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    assert len(tokenizer) == CONFIG["vocab_size"]
    for text in ("pinned memory on the host is fast", "WSL2 kernel 5.15.167.4 — ünïcode!", "   spaces  "):
        ids = tokenizer(text)["input_ids"]
        assert ids[0] == BOS_ID
        assert tokenizer.decode(ids, skip_special_tokens=True) == text


def test_same_seed_same_bytes_and_the_cache_is_reused(model_dir, tmp_path):
    again = tiny_model(tmp_path)
    assert digest(again) == digest(model_dir)
    stamp = (again / "model.safetensors").stat().st_mtime_ns
    assert tiny_model(tmp_path) == again
    assert (again / "model.safetensors").stat().st_mtime_ns == stamp
    other = tiny_model(tmp_path, seed=1)
    assert digest(other)["model.safetensors"] != digest(model_dir)["model.safetensors"]
