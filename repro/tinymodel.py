"""A tiny Llama made on this machine: config, seeded safetensors weights, a trained tokenizer.

No hub is reachable from runners or CI, so the reproduction brings its own
model. ``vllm serve DIR`` and ``LLM(model=DIR)`` load it like any Hugging Face
checkpoint. Same seed, same bytes: the weights come from numpy's seeded
generator and the tokenizer is trained on a corpus generated here.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tokenizers import Tokenizer

FORMAT = 2  # bump when the files below change, so caches are rebuilt
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2

# head_dim 64: every attention backend vLLM ships accepts it.
CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 512,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": False,
    "initializer_range": 0.02,
    "bos_token_id": BOS_ID,
    "eos_token_id": EOS_ID,
    "pad_token_id": PAD_ID,
    "torch_dtype": "float16",
}


# The tiny model's shape as a mixture of experts, for asking vLLM which runner it picks for an MoE model (before
# 0.29.0 such models stayed on V1). vLLM reads that from the config alone, so this model has no weights: its
# directory holds the config and the tiny model's tokenizer.
MOE_CONFIG: dict[str, Any] = {
    **{key: value for key, value in CONFIG.items() if key not in ("attention_bias", "mlp_bias", "head_dim")},
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def tensor_shapes(config: dict = CONFIG) -> dict[str, tuple[int, ...]]:
    """Hugging Face Llama parameter names and shapes for ``config``."""
    h, i, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    q = config["num_attention_heads"] * config["head_dim"]
    kv = config["num_key_value_heads"] * config["head_dim"]
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (v, h)}
    for n in range(config["num_hidden_layers"]):
        p = f"model.layers.{n}"
        shapes |= {
            f"{p}.input_layernorm.weight": (h,),
            f"{p}.post_attention_layernorm.weight": (h,),
            f"{p}.self_attn.q_proj.weight": (q, h),
            f"{p}.self_attn.k_proj.weight": (kv, h),
            f"{p}.self_attn.v_proj.weight": (kv, h),
            f"{p}.self_attn.o_proj.weight": (h, q),
            f"{p}.mlp.gate_proj.weight": (i, h),
            f"{p}.mlp.up_proj.weight": (i, h),
            f"{p}.mlp.down_proj.weight": (h, i),
        }
    shapes |= {"model.norm.weight": (h,), "lm_head.weight": (v, h)}
    return shapes


def _weights(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in tensor_shapes().items():
        if name.endswith("norm.weight"):
            weights[name] = np.ones(shape, dtype=np.float16)
        else:
            weights[name] = rng.normal(0.0, CONFIG["initializer_range"], shape).astype(np.float16)
    return weights


def _corpus() -> list[str]:
    """Deterministic training text: this project's words and seeded pseudo-words, rich enough for 512 tokens."""
    words = (
        "pinned memory host device copy graph capture replay kernel stream buffer offload weight "
        "layer token model runner engine cache page lock driver window linux subsystem version "
        "the a of to in on with from for and or not is are was be fast slow zero one two three"
    ).split()
    rng = np.random.default_rng(1234)
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"]
    words += ["".join(rng.choice(syllables, size=int(rng.integers(1, 4)))) for _ in range(400)]
    lines = []
    for _ in range(3000):
        picks = rng.integers(0, len(words), size=int(rng.integers(4, 12)))
        lines.append(" ".join(words[k] for k in picks) + ".")
    return lines


def _tokenizer() -> Tokenizer:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=CONFIG["vocab_size"],
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", BOS_ID)]
    )
    return tok


def write_model(directory: Path, seed: int = 0) -> None:
    from safetensors.numpy import save_file

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(CONFIG, indent=2, sort_keys=True) + "\n")
    generation = {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID, "do_sample": False}
    (directory / "generation_config.json").write_text(json.dumps(generation, indent=2, sort_keys=True) + "\n")
    # One metadata key only: safetensors writes the metadata map in hash order, so
    # two keys would make the bytes differ from process to process.
    save_file(_weights(seed), str(directory / "model.safetensors"), metadata={"format": "pt"})
    tok = _tokenizer()
    if tok.get_vocab_size() != CONFIG["vocab_size"]:
        raise RuntimeError(f"tokenizer has {tok.get_vocab_size()} tokens, config says {CONFIG['vocab_size']}")
    tok.save(str(directory / "tokenizer.json"))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "model_max_length": CONFIG["max_position_embeddings"],
        "clean_up_tokenization_spaces": False,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2, sort_keys=True) + "\n")


def cache_key(seed: int) -> str:
    text = json.dumps({"config": CONFIG, "seed": seed, "format": FORMAT}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _built(target: Path, last_file: str, write: Callable[[Path], None]) -> Path:
    """``target``, written once by ``write`` into a staging directory and moved into place whole."""
    if (target / last_file).exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tiny-", dir=target.parent))
    try:
        write(staging)
        os.replace(staging, target)
    except OSError:
        if not (target / last_file).exists():  # not another process winning the race
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def tiny_model(cache: Path, seed: int = 0) -> Path:
    """The tiny model's directory under ``cache``, built once (atomically) and reused."""
    return _built(cache / f"tiny-llama-s{seed}-{cache_key(seed)}", "model.safetensors", lambda d: write_model(d, seed))


def tiny_moe(cache: Path) -> Path:
    """The MoE config's directory under ``cache`` (``MOE_CONFIG``, the tiny model's tokenizer), built once."""
    dense = tiny_model(cache)
    key = hashlib.sha256(json.dumps({"config": MOE_CONFIG, "tokenizer": dense.name}, sort_keys=True).encode())

    def write(directory: Path) -> None:
        for name in TOKENIZER_FILES:
            shutil.copyfile(dense / name, directory / name)
        (directory / "config.json").write_text(json.dumps(MOE_CONFIG, indent=2, sort_keys=True) + "\n")

    return _built(cache / f"tiny-moe-{key.hexdigest()[:12]}", "config.json", write)
