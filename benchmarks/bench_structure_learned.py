"""Would a classifier learned over the 45 signals find navigation pages where the ``structure`` preset's hand-set
thresholds miss them? Leave-one-set-out on the labelled pages of ``bench_structure_real.py``: a model is fitted
on every set but one and scored on the one left out, each set in turn, so every row is a page generator the
model never saw (the question the held-out sets ask of the preset). The preset's own row is the same pages.

Models (scikit-learn, the ``quality`` extra): logistic regression over the standardised signals (classes
balanced), and gradient-boosted trees of depth 2; each over all 45 signals and over the 15 line-structure and
size signals alone, and each at two decision points: the model's own (probability 0.5), and the point that keeps
97% of the training sets' prose (the goal asks 95% kept of unseen prose, so the threshold is set from seen
prose with room). Deterministic: the same labels and texts give the same table.

usage: python -P benchmarks/bench_structure_learned.py [--render]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

from results import RESULTS, replace_block  # noqa: E402

OUT = os.path.join(REPO, "benchmarks", "results", "structure_learned.json")
SETS = ("tuning", "held-out", "held-out-languages", "held-out-rust", "held-out-new", "held-out-fresh")
STRUCTURE_SIGNALS = [
    "words_per_line",
    "short_item_char_frac",
    "short_item_line_frac",
    "template_dup_line_frac",
    "list_line_frac",
    "ident_line_frac",
    "url_line_frac",
    "short_line_frac",
    "terminal_punct_line_frac",
    "mean_line_len",
    "bullet_line_frac",
    "stop_word_ratio",
    "n_sentences",
    "n_lines",
    "n_words",
]
LOGGED = {"n_words", "n_lines", "n_sentences", "mean_line_len", "words_per_line"}  # counts and lengths: log scale
PROSE_KEPT_ON_SEEN = 0.97


def features(signals, names: list[str]) -> np.ndarray:
    cols = [np.nan_to_num(np.asarray(signals.column(c).to_pylist(), float)) for c in names]
    return np.column_stack([np.log1p(c) if n in LOGGED else c for n, c in zip(names, cols)])


def models():
    from sklearn.ensemble import GradientBoostingClassifier
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    yield (
        "logistic regression",
        lambda: make_pipeline(StandardScaler(), LogisticRegression(class_weight="balanced", max_iter=5000)),
    )
    yield "boosted trees (depth 2)", lambda: GradientBoostingClassifier(n_estimators=100, max_depth=2, random_state=0)


def counts(drop: np.ndarray, nav: np.ndarray) -> dict:
    return {
        "nav": int(nav.sum()),
        "nav_dropped": int(drop[nav].sum()),
        "prose": int((~nav).sum()),
        "prose_kept": int((~drop[~nav]).sum()),
    }


def leave_one_set_out(x: np.ndarray, nav: np.ndarray, sets: np.ndarray, make) -> dict[str, dict]:
    """Per decision point, per set: the model fitted on the other sets, scored on this one."""
    out: dict[str, dict] = {"probability 0.5": {}, f"{PROSE_KEPT_ON_SEEN:.0%} of seen prose kept": {}}
    for s in SETS:
        seen, unseen = sets != s, sets == s
        model = make()
        model.fit(x[seen], nav[seen])
        p_seen, p = model.predict_proba(x[seen])[:, 1], model.predict_proba(x[unseen])[:, 1]
        point = float(np.quantile(p_seen[~nav[seen]], PROSE_KEPT_ON_SEEN))
        out["probability 0.5"][s] = counts(p > 0.5, nav[unseen])
        out[f"{PROSE_KEPT_ON_SEEN:.0%} of seen prose kept"][s] = {**counts(p > point, nav[unseen]), "point": point}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--render", action="store_true", help="rebuild the table from the committed JSON")
    args = ap.parse_args()
    if args.render:
        with open(OUT) as fh:
            result = json.load(fh)
    else:
        import bench_structure_real

        from airflow_curation.core.filters import apply_rules, resolve_rules
        from airflow_curation.core.signals import compute_signals

        pages, texts = bench_structure_real.pages_and_texts()
        nav = np.array([p["label"] == "nav" for p in pages])
        sets = np.array([p["set"] for p in pages])
        signals = compute_signals(texts)
        keep = np.asarray(
            apply_rules(signals, resolve_rules("structure")).column("keep").to_numpy(zero_copy_only=False)
        )
        result = {
            "pages": len(pages),
            "preset": {s: counts(~keep[sets == s], nav[sets == s]) for s in SETS},
            "models": {},
        }
        all_signals = [c for c in signals.column_names if c != "id"]
        warnings.filterwarnings("ignore", category=RuntimeWarning)
        for fname, names in (("all signals", all_signals), ("line-structure signals", STRUCTURE_SIGNALS)):
            x = features(signals, names)
            for mname, make in models():
                for point, per_set in leave_one_set_out(x, nav, sets, make).items():
                    result["models"][f"{mname}, {fname}, {point}"] = per_set
        with open(OUT + ".tmp", "w") as fh:
            json.dump(result, fh, indent=1)
        os.replace(OUT + ".tmp", OUT)
    text = render(result)
    print(text)
    replace_block(RESULTS, "bench_structure_learned", text, after="bench_structure_real")
    return 0


def _cell(v: dict) -> str:
    return f"{100 * v['nav_dropped'] / max(1, v['nav']):.1f}% / {100 * v['prose_kept'] / max(1, v['prose']):.1f}%"


def render(r: dict) -> str:
    lines = [
        "## Structure: a learned classifier, leave one set out (`bench_structure_learned.py`)",
        "",
        f"The {r['pages']} labelled pages of *Structure preset on real pages* above. Each cell: navigation dropped / prose kept on that set,",
        "by a model fitted on the other five sets (a generator it never saw); the `structure` row is the shipped",
        "preset on the same pages. Command: `python -P benchmarks/bench_structure_learned.py` (`--render` rebuilds",
        "this table from `benchmarks/results/structure_learned.json`).",
        "",
        "| classifier | " + " | ".join(SETS) + " |",
        "| --- | " + " | ".join("---:" for _ in SETS) + " |",
        "| `structure` preset (hand-set thresholds) | " + " | ".join(_cell(r["preset"][s]) for s in SETS) + " |",
    ]
    for name, per_set in r["models"].items():
        lines.append(f"| {name} | " + " | ".join(_cell(per_set[s]) for s in SETS) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
