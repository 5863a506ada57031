"""The four enrichment tasks: what they send to an engine and the columns they make of its answers.

A task is engine-agnostic: ``run(engine, texts)`` returns one value per text for each of its columns,
plus ``input_tokens`` (the document's full length in tokens) and ``truncated`` (whether it was cut to
``max_input_tokens``). Nothing a model outputs can crash a task: an unusable generation becomes a row
with ``valid = false`` and the reason in ``error``.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

from airflow_curation.stages.enrich.model_runtimes import Engine

DEFAULT_PROMPT = (
    "Rewrite the document below as one instruction a user could give and the response that answers it. "
    'Reply with JSON only, exactly {"instruction": "...", "response": "..."}.\n\n'
    "Document:\n{text}\n\nJSON:"
)
# Structured output: vLLM constrains decoding to this shape (a regular expression rather than a JSON schema:
# a schema lets a weak model pad with whitespace until max_tokens; this allows none and no control chars).
_JSON_CHAR = r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt])'


def pair_regex(max_chars: int | None = None) -> str:
    rep = f"{{1,{int(max_chars)}}}" if max_chars else "+"
    return r'\{"instruction":"' + _JSON_CHAR + rep + r'","response":"' + _JSON_CHAR + rep + r'"\}'


COMMON_FIELDS = [pa.field("input_tokens", pa.int32()), pa.field("truncated", pa.bool_())]


class Task:
    """Base class. :param config: the enrich stage's settings."""

    name = "task"
    runner = "pooling"

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.max_input_tokens = int(config["max_input_tokens"])

    def fields(self, engine_labels: list[str] | None = None) -> list[pa.Field]:
        raise NotImplementedError

    def run(self, engine: Engine, texts: list[str]) -> dict[str, list]:
        raise NotImplementedError

    def limit(self, engine: Engine) -> int:
        """``max_input_tokens``, lowered to what the model accepts."""
        return min(self.max_input_tokens, engine.max_len or self.max_input_tokens)

    def _token_ids(self, engine: Engine, texts: list[str]) -> tuple[list[list[int]], dict[str, list]]:
        limit = self.limit(engine)
        ids, lengths = engine.encode(texts, limit)
        return ids, {"input_tokens": lengths, "truncated": [n > limit for n in lengths]}


class EmbedTask(Task):
    """``embedding``: a fixed-size float32 vector per document."""

    name = "embed"

    def fields(self, engine_labels=None):
        dim = self.config.get("embedding_dim")
        vec = pa.list_(pa.float32(), int(dim)) if dim else pa.list_(pa.float32())
        return [pa.field("embedding", vec)]

    def run(self, engine, texts):
        ids, common = self._token_ids(engine, texts)
        vectors = engine.embed(ids)
        return {"embedding": [v.tolist() for v in vectors], **common}


class ClassifyTask(Task):
    """``label`` (the most probable), ``label_prob`` and ``probs`` (one per label, in ``labels`` order)."""

    name = "classify"

    def fields(self, engine_labels=None):
        return [
            pa.field("label", pa.string()),
            pa.field("label_prob", pa.float32()),
            pa.field("probs", pa.list_(pa.float32())),
        ]

    def labels(self, engine: Engine, n: int) -> list[str]:
        labels = self.config.get("labels") or engine.labels or [f"LABEL_{i}" for i in range(n)]
        if len(labels) != n:
            raise ValueError(f"classify: {len(labels)} labels configured ({labels}) but the model has {n} outputs")
        return list(labels)

    def run(self, engine, texts):
        ids, common = self._token_ids(engine, texts)
        probs = engine.classify(ids)
        labels = self.labels(engine, probs.shape[1])
        best = probs.argmax(axis=1)
        return {
            "label": [labels[i] for i in best],
            "label_prob": probs[np.arange(len(best)), best].tolist(),
            "probs": probs.tolist(),
            **common,
        }


class ScoreTask(Task):
    """``score``: one scalar per document from a reward or quality model.

    A one-output model (regression or reward head) gives its output; a classifier gives the probability of
    ``score_label`` (default: its last label, e.g. "positive" or "high quality").
    """

    name = "score"

    def fields(self, engine_labels=None):
        return [pa.field("score", pa.float32())]

    def run(self, engine, texts):
        ids, common = self._token_ids(engine, texts)
        probs = engine.classify(ids)
        if probs.shape[1] == 1:
            scores = probs[:, 0]
        else:
            labels = self.config.get("labels") or engine.labels or []
            want = self.config.get("score_label")
            idx = labels.index(want) if want in labels else probs.shape[1] - 1
            scores = probs[:, idx]
        return {"score": scores.astype(np.float32).tolist(), **common}


class GenerateTask(Task):
    """Instruction/response pairs from a prompt template.

    Columns: ``instruction``, ``response`` (null when invalid), ``valid``, ``error`` (why a generation was
    rejected: ``empty_output``, ``no_json``, ``invalid_json``, ``not_an_object``, ``missing_<field>``,
    ``empty_<field>``, each suffixed ``_truncated`` when the model hit ``max_tokens``), ``raw`` (the model's
    text, kept for inspection) and ``output_tokens``.
    """

    name = "generate"
    runner = "generate"

    def __init__(self, config):
        super().__init__(config)
        self.template = config.get("prompt_template") or DEFAULT_PROMPT
        if "{text}" not in self.template:
            raise ValueError("generate: prompt_template must contain {text}")

    def fields(self, engine_labels=None):
        return [
            pa.field("instruction", pa.string()),
            pa.field("response", pa.string()),
            pa.field("valid", pa.bool_()),
            pa.field("error", pa.string()),
            pa.field("raw", pa.string()),
            pa.field("output_tokens", pa.int32()),
        ]

    def sampling(self) -> dict[str, Any]:
        c = self.config
        s = {"max_tokens": int(c["max_tokens"]), "temperature": float(c["temperature"]), "top_p": float(c["top_p"])}
        if c.get("seed") is not None:
            s["seed"] = int(c["seed"])
        return s

    def run(self, engine, texts):
        prompts, lengths, cut = [], [], []
        limit = self.max_input_tokens
        if engine.max_len:  # the prompt around the document and the output must fit in the context too
            overhead = len(engine.tokenizer(self.template.replace("{text}", ""))["input_ids"]) + 1
            room = engine.max_len - overhead - min(int(self.config["max_tokens"]), engine.max_len // 2)
            limit = max(1, min(limit, room))
        for t in texts:
            body, n, was_cut = engine.truncate_text(t, limit)
            # str.replace, not str.format: documents and JSON examples are full of braces.
            prompts.append(self.template.replace("{text}", body))
            lengths.append(n)
            cut.append(was_cut)
        regex = pair_regex(self.config.get("max_field_chars")) if self.config.get("structured_output") else None
        gens = engine.generate(prompts, self.sampling(), regex=regex)
        cols: dict[str, list] = {k: [] for k in ("instruction", "response", "valid", "error", "raw", "output_tokens")}
        for g in gens:
            pair, error = parse_pair(g.text)
            if error and g.finish_reason == "length":
                error += "_truncated"
            cols["instruction"].append(pair["instruction"] if pair else None)
            cols["response"].append(pair["response"] if pair else None)
            cols["valid"].append(error is None)
            cols["error"].append(error)
            cols["raw"].append(g.text)
            cols["output_tokens"].append(g.output_tokens)
        return {**cols, "input_tokens": lengths, "truncated": cut}


def parse_pair(text: str) -> tuple[dict[str, str] | None, str | None]:
    """The first JSON object in ``text`` as an instruction/response pair, or (None, reason)."""
    if not text or not text.strip():
        return None, "empty_output"
    start = text.find("{")
    if start < 0:
        return None, "no_json"
    try:
        obj, _ = json.JSONDecoder(strict=False).raw_decode(text[start:])  # control chars: tolerated
    except ValueError:
        return None, "invalid_json"
    if not isinstance(obj, dict):
        return None, "not_an_object"
    for key in ("instruction", "response"):
        if key not in obj:
            return None, f"missing_{key}"
        if not isinstance(obj[key], str) or not obj[key].strip():
            return None, f"empty_{key}"
    return {"instruction": obj["instruction"].strip(), "response": obj["response"].strip()}, None


TASKS: dict[str, type[Task]] = {t.name: t for t in (EmbedTask, ClassifyTask, ScoreTask, GenerateTask)}


def make_task(config: dict[str, Any]) -> Task:
    try:
        return TASKS[config["task"]](config)
    except KeyError:
        raise ValueError(f"enrich: unknown task {config.get('task')!r}; known: {sorted(TASKS)}") from None
