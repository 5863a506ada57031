"""The arithmetic of a mixture: targets parsed and checked, the whole-data tally turned into per-key sampling
rates and hash thresholds, and a document's epochs from its hash.

A document's decision depends only on ``hash(seed, id)`` and on its key's rate and threshold, which come from
the tally of the whole input: the same selection whatever the shard order, grouping or parallelism.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from airflow_curation.core.xxh64 import xxh64_prefixed

# A document's hash is cut to this many bins; a key's fractional epoch takes the documents whose bin is below
# its threshold. The tally counts tokens (or documents) per bin, so the threshold is chosen, and the achieved
# share known, to within one bin of the key's mass (1/65536 of it).
HASH_BITS = 16
BINS = 1 << HASH_BITS
SUM_SLACK = 1e-6  # proportions must sum to 1 within this


class MixError(ValueError):
    """A mixture that cannot be made as declared (bad targets, an unknown key, a key without rows)."""


def parse_targets(value: Any) -> dict[str, float]:
    """``{"web": 0.7, "code": 0.3}``, its JSON text, or ``"web=0.7,code=0.3"`` -> key -> proportion."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            value = json.loads(text)
        else:
            value = {}
            for item in (p for p in text.split(",") if p.strip()):
                key, sep, prop = item.rpartition("=")  # a bucket key may hold "=" (">=0.8")
                if not sep or not key.strip():
                    raise ValueError(f"target {item!r}: expected KEY=PROPORTION")
                value[key.strip()] = prop
    if not isinstance(value, dict):
        raise ValueError(f"targets: expected KEY=PROPORTION pairs or a JSON object, got {value!r}")
    out: dict[str, float] = {}
    for key, prop in value.items():
        try:
            p = float(prop)
        except (TypeError, ValueError):
            raise ValueError(f"target {key!r}: proportion {prop!r} is not a number") from None
        if not 0.0 <= p <= 1.0 or math.isnan(p):
            raise ValueError(f"target {key!r}: proportion {p} is not between 0 and 1")
        out[str(key)] = p
    return dict(sorted(out.items()))


def check_sum(targets: dict[str, float]) -> None:
    """Proportions must describe the whole mixture."""
    total = sum(targets.values())
    if abs(total - 1.0) > SUM_SLACK:
        raise MixError(f"mix: target proportions sum to {total:.6g}, not 1: {targets}")


def doc_bins(seed: int, ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Each id's hash bin, from ``xxh64(seed:id)`` (independent of where the row is), hashed over the
    column's buffers: a Python string and hash call per row cost ~1.5 us, a third of the stage's CPU a row."""
    return (xxh64_prefixed(f"{seed}:".encode(), ids) >> np.uint64(64 - HASH_BITS)).astype(np.int64)


@dataclass
class KeyPlan:
    """How one key is sampled: ``whole`` epochs of every document plus one more for those whose hash bin is
    below ``threshold``; ``rate`` is what was asked (``selected / available`` in the mixture's unit)."""

    target: float
    available: int
    rate: float
    whole: int
    threshold: int
    planned: int  # what these whole epochs and threshold select, in the mixture's unit (from the tally)

    def epochs(self, bins: np.ndarray) -> np.ndarray:
        return self.whole + (bins < self.threshold).astype(np.int64)


def plan_keys(
    targets: dict[str, float],
    available: dict[str, int],
    hists: dict[str, np.ndarray],
    total: int | None,
    max_epochs: float | None,
) -> dict[str, KeyPlan]:
    """Per targeted key: its rate and threshold.

    :param available: per key, the rows' mass in the mixture's unit (tokens or documents), over all inputs.
    :param hists: per targeted key, that mass per hash bin.
    :param total: the mixture's size in its unit; None: the largest that needs no up-sampling (the scarcest
        key, relative to its target, is taken whole).
    """
    check_sum(targets)
    empty = sorted(k for k, p in targets.items() if p > 0 and not available.get(k))
    if empty:
        seen = sorted(k for k, v in available.items() if v)[:20]
        raise MixError(f"mix: targets {empty} have no rows in the input (keys with rows: {seen})")
    wanted = {k: p for k, p in targets.items() if p > 0}
    if total is None:
        total = min(available[k] / p for k, p in wanted.items())
    if total <= 0:
        raise MixError(f"mix: total must be positive, not {total}")
    plans: dict[str, KeyPlan] = {}
    for key, p in targets.items():
        a = int(available.get(key, 0))
        rate = p * total / a if a else 0.0
        if max_epochs is not None and rate > max_epochs:
            raise MixError(
                f"mix: key {key!r} needs {rate:.3g} epochs of its {a} available to reach {p:.3g} of {total:.6g}, "
                f"more than max_epochs={max_epochs:g}"
            )
        whole = int(math.floor(rate + 1e-12))
        frac = max(rate - whole, 0.0)
        hist = hists.get(key, np.zeros(BINS, dtype=np.int64))
        cum = np.concatenate([[0], np.cumsum(hist)])
        want = frac * a
        # the bin boundary whose cumulative mass is nearest the fractional epoch's share
        hi = int(np.searchsorted(cum, want, side="left"))
        cands = [b for b in (hi - 1, hi) if 0 <= b <= BINS]
        threshold = min(cands, key=lambda b: (abs(cum[b] - want), b)) if frac > 0 else 0
        plans[key] = KeyPlan(p, a, rate, whole, int(threshold), int(whole * a + cum[threshold]))
    return plans


def bucket_labels(values: np.ndarray, edges: list[float]) -> list[str]:
    """Numeric values cut at ``edges`` (sorted) into labels ``<e0``, ``e0-e1``..., ``>=eN``; null stays null."""
    labels = [f"<{edges[0]:g}"] + [f"{a:g}-{b:g}" for a, b in zip(edges, edges[1:])] + [f">={edges[-1]:g}"]
    idx = np.digitize(np.nan_to_num(values, nan=-np.inf), edges, right=False)
    return [None if math.isnan(v) else labels[i] for v, i in zip(values, idx)]
