"""``curation quality-train``: train the quality stage's classifier from labelled Parquet.

    curation quality-train --input labelled.parquet [--input more.parquet] --text-field text \\
        --label-field label [--positive hq] --out model_dir/ [--embed-model minilm_dir/]

Writes ``model_dir/weights.npy`` and ``model_dir/model.json`` (each atomically; see
:mod:`airflow_curation.stages.quality.model`) and prints the training figures (rows, held-out AUC) and the
model's checksum. ``curation quality --model model_dir/ ...`` scores with it. With ``--embed-model``, the
features are that embedding model's embeddings, computed by the enrich stage's model runtime, instead of
hashed n-grams.
"""

from __future__ import annotations

import argparse
import sys

from airflow_curation.cli.common import print_summary


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "quality-train",
        help="train the quality classifier (hashed n-grams or embeddings + logistic regression) from labelled Parquet",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--input", action="append", required=True, help="labelled Parquet file (repeat for more)")
    p.add_argument("--out", required=True, help="model folder to write (model.json + weights.npy)")
    p.add_argument("--text-field", default="text", help="column with the text (default: text)")
    p.add_argument("--label-field", default="label", help="column with the label (default: label)")
    p.add_argument("--positive", help="the label of good documents (default: 1/true when labels are 0/1)")
    p.add_argument("--buckets", type=int, default=1 << 18, help="hash buckets, a power of two (default: 2**18)")
    p.add_argument("--ngrams", type=int, default=2, help="longest word n-gram (default: 2)")
    p.add_argument("--c", type=float, default=4.0, help="inverse L2 regularisation strength (default: 4)")
    p.add_argument("--holdout", type=float, default=0.1, help="fraction held out to measure AUC (default: 0.1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the held-out draw and the solver (default: 0)")
    p.add_argument(
        "--embed-model",
        help="embedding model folder (Hugging Face layout): train on its embeddings instead of hashed n-grams",
    )
    p.add_argument(
        "--embed-runtime",
        default="transformers",
        choices=["transformers", "vllm"],
        help="enrich model runtime that computes the embeddings (default: transformers)",
    )
    p.add_argument("--max-tokens", type=int, default=256, help="embeddings: tokens read per document (default: 256)")
    p.set_defaults(func=_train)


def _train(args: argparse.Namespace) -> int:
    from airflow_curation.stages.quality.model import EmbeddingFeatures, Features, train_parquet

    try:
        if args.embed_model:
            features = EmbeddingFeatures.for_model(
                args.embed_model, runtime=args.embed_runtime, max_tokens=args.max_tokens
            )
        else:
            features = Features(buckets=args.buckets, ngrams=args.ngrams)
        summary = train_parquet(
            args.input,
            args.out,
            text_field=args.text_field,
            label_field=args.label_field,
            positive=args.positive,
            features=features,
            c=args.c,
            holdout=args.holdout,
            seed=args.seed,
        )
    except (ValueError, OSError, RuntimeError) as e:  # a ModelLoadError is a RuntimeError
        print(f"curation quality-train: {e}", file=sys.stderr)
        return 1
    print_summary(summary)
    return 0
