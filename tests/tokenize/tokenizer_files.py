"""Tokenizer files for the tokenize tests and benchmark, trained here with the ``tokenizers`` trainers on
text from the standard library (never downloaded)."""

from __future__ import annotations

import ast
import glob
import os
import sysconfig

EOS = "<|endoftext|>"
PAD = "<pad>"


def stdlib_prose(limit: int = 300) -> list[str]:
    """Docstrings of standard-library modules, one document per module."""
    docs = []
    for path in sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py"))):
        try:
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read())
        except (SyntaxError, UnicodeDecodeError):
            continue
        strings = [ast.get_docstring(n) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.FunctionDef))]
        text = "\n\n".join(s for s in strings if s)
        if text:
            docs.append(text)
        if len(docs) >= limit:
            break
    return docs


def train_bpe(path: str, texts: list[str], vocab_size: int = 2000) -> str:
    """A byte-level BPE tokenizer.json (GPT-2 style) with EOS and PAD special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.save(path)
    return path


def train_wordpiece(path: str, texts: list[str], vocab_size: int = 2000) -> str:
    """A BERT-style WordPiece tokenizer.json ([SEP] is its end-of-document token)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer()
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=["[UNK]", "[CLS]", "[SEP]", "[PAD]"], show_progress=False
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.save(path)
    return path
