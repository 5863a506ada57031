"""The quality model: hashed word and punctuation n-grams (fastText-style features) and a logistic
regression head, trained from labelled Parquet and saved as a small versioned folder.

A model folder holds two files, both written atomically:

- ``weights.npy``: float32, one weight per feature (per hash bucket, ``buckets`` of them, 1 MiB at 2**18;
  or per embedding dimension);
- ``model.json``: the format and version, the feature settings, the bias, the labels, the weights'
  checksum and the training figures (rows, held-out AUC). Written last, so that a folder with a
  ``model.json`` always has the weights it names.

The model's identity (:attr:`QualityModel.checksum`) is the xxh64 of ``model.json``, which names the
weights' checksum: the ``quality`` stage puts it in its fingerprint, so a retrained model is a new
configuration and a rerun recomputes every shard.

Features come from scikit-learn's ``HashingVectorizer`` (MurmurHash3, no vocabulary to store, the same
buckets on every machine); newlines and punctuation are tokens too, so the one-short-item-per-line
shape of navigation and index pages is visible to the linear head, as fastText's ``</s>`` makes it.

An embedding model (``features.kind: embedding``, :class:`EmbeddingFeatures`) puts the same logistic head
on a sentence embedding computed by the enrich stage's model runtime (:mod:`airflow_curation.stages.enrich`:
the same engines, pooling and truncation as ``enrich --task embed``). Its ``model.json`` names the
embedding model folder and that folder's checksum; loading refuses a folder whose content differs.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from airflow_curation.core import storage
from airflow_curation.core.fingerprint import StreamChecksum, checksum_bytes, checksum_folder

log = logging.getLogger(__name__)

FORMAT = "airflow-curation/quality-model"
FORMAT_VERSION = 1
MODEL_FILE = "model.json"
WEIGHTS_FILE = "weights.npy"
# Words, single punctuation marks and newlines: the tokens of the n-grams.
TOKEN_PATTERN = r"(?u)\b\w+\b|[^\w\s]|\n"


class ModelError(ValueError):
    """A model folder is missing, of an unknown version, or does not match its checksum."""


@dataclass(frozen=True)
class Features:
    """How text becomes a feature vector.

    :param buckets: hash buckets (a power of two; more means fewer collisions and a bigger model).
    :param ngrams: the longest n-gram (1: words only, 2: words and word pairs, ...).
    :param lowercase: fold case before hashing.
    :param max_chars: only the first ``max_chars`` characters of a document are read (long documents
        cost no more than this; 0 for all).
    """

    buckets: int = 1 << 18
    ngrams: int = 2
    lowercase: bool = True
    max_chars: int = 20_000
    kind: str = "hashed"

    @property
    def size(self) -> int:
        """Weights of the linear head."""
        return self.buckets

    def __post_init__(self) -> None:
        if self.buckets < 2 or self.buckets & (self.buckets - 1):
            raise ValueError(f"quality model: buckets must be a power of two, not {self.buckets}")
        if not 1 <= self.ngrams <= 5:
            raise ValueError(f"quality model: ngrams must be 1 to 5, not {self.ngrams}")

    def vectorizer(self):
        from sklearn.feature_extraction.text import HashingVectorizer

        return HashingVectorizer(
            n_features=self.buckets,
            ngram_range=(1, self.ngrams),
            lowercase=self.lowercase,
            token_pattern=TOKEN_PATTERN,
            alternate_sign=False,
            norm="l2",
            dtype=np.float32,
        )

    def transform(self, texts: list[str | None]):
        """A sparse (rows x buckets) matrix; a null text is an empty document."""
        cut = self.max_chars or None
        return self.vectorizer().transform([(t or "")[:cut] for t in texts])


@dataclass(frozen=True)
class EmbeddingFeatures:
    """Text becomes the embedding of an embedding model, run by the enrich stage's model runtime.

    :param model: the embedding model's folder (Hugging Face layout; sentence-transformers pooling files
        are honoured, as in ``enrich --task embed``).
    :param model_checksum: :func:`checksum_folder` of that folder when the head was trained.
    :param dim: the embedding's size (set by training).
    :param runtime: the enrich model runtime: ``transformers`` (CPU or GPU) or ``vllm``.
    :param max_tokens: documents are cut to this many tokens (or the model's limit, if lower).
    :param batch_rows: texts per model call.
    """

    model: str
    model_checksum: str = ""
    dim: int = 0
    runtime: str = "transformers"
    max_tokens: int = 256
    batch_rows: int = 32
    kind: str = "embedding"

    @classmethod
    def for_model(cls, model: str, **kwargs: Any) -> "EmbeddingFeatures":
        return cls(model=model, model_checksum=checksum_folder(model), **kwargs)

    @property
    def size(self) -> int:
        return self.dim

    def verify(self) -> None:
        """Refuse an embedding model folder whose content is not the one the head was trained on."""
        try:
            got = checksum_folder(self.model)
        except FileNotFoundError as e:
            raise ModelError(f"quality model: its embedding model is missing ({e})") from e
        if got != self.model_checksum:
            raise ModelError(
                f"quality model: embedding model {self.model} has checksum {got}, but the head was trained on "
                f"{self.model_checksum}: retrain the head (curation quality-train --embed-model) or restore it"
            )

    def transform(self, texts: list[str | None]) -> np.ndarray:
        """A dense (rows x dim) float32 matrix; a null text is an empty document."""
        # The enrich stage's own pieces: one cached engine per process, EmbedTask's truncation and
        # pooling, length-sorted batches.
        from airflow_curation.stages.enrich.executors import run_batches
        from airflow_curation.stages.enrich.model_runtimes import EngineSpec, get_engine
        from airflow_curation.stages.enrich.tasks import EmbedTask

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        engine = get_engine(EngineSpec(engine=self.runtime, model=self.model, runner="pooling", device="auto"))
        out = run_batches(
            EmbedTask({"max_input_tokens": self.max_tokens}), engine, [t or "" for t in texts], self.batch_rows
        )
        return np.asarray(out["embedding"], dtype=np.float32).reshape(len(texts), -1)


FEATURE_KINDS = {"hashed": Features, "embedding": EmbeddingFeatures}


def features_from(doc: dict[str, Any]) -> Features | EmbeddingFeatures:
    kind = doc.get("kind", "hashed")
    if kind not in FEATURE_KINDS:
        raise ModelError(f"quality model: unknown features kind {kind!r} (known: {sorted(FEATURE_KINDS)})")
    return FEATURE_KINDS[kind](**doc)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-np.clip(z, -60.0, 60.0)))).astype(np.float32)


@dataclass
class QualityModel:
    """A trained model: ``score(texts)`` is the probability of the positive (good) label."""

    features: Features | EmbeddingFeatures
    weights: np.ndarray
    bias: float
    labels: dict[str, Any]  # {"positive": value, "negative": value} as found in the training data
    training: dict[str, Any] = field(default_factory=dict)
    checksum: str = ""

    def decision(self, texts: list[str | None]) -> np.ndarray:
        return self.decision_x(self.features.transform(texts))

    def decision_x(self, x) -> np.ndarray:
        """The head on feature rows ``x`` (sparse or dense)."""
        return np.asarray(x @ self.weights, dtype=np.float64).ravel() + self.bias

    def score(self, texts: list[str | None]) -> np.ndarray:
        """P(good) per text, float32 in [0, 1]."""
        return _sigmoid(self.decision(texts))

    # -- the folder ----------------------------------------------------------------------------------
    def save(self, folder: str) -> str:
        """Write ``weights.npy`` then ``model.json`` into ``folder`` (each atomically); returns the
        model's checksum."""
        storage.makedirs(folder)
        weights = np.ascontiguousarray(self.weights, dtype=np.float32)
        sink = StreamChecksum()
        with storage.atomic_open(storage.join(folder, WEIGHTS_FILE)) as f:
            buf = _npy_bytes(weights)
            sink.update(buf)
            f.write(buf)
        doc = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "features": asdict(self.features),
            "bias": float(self.bias),
            "labels": self.labels,
            "weights_file": WEIGHTS_FILE,
            "weights_checksum": sink.hexdigest(),
            "training": self.training,
        }
        data = (json.dumps(doc, indent=1, sort_keys=True, default=str) + "\n").encode()
        storage.write_bytes(storage.join(folder, MODEL_FILE), data)
        self.checksum = checksum_bytes(data)
        return self.checksum

    @classmethod
    def load(cls, folder: str, embed_model: str | None = None) -> "QualityModel":
        """:param embed_model: for an embedding model, where its embedding model lies on this machine
        (default: the folder ``model.json`` names); checked against the recorded checksum."""
        data = read_model_json(folder)
        doc = json.loads(data)
        if doc.get("format") != FORMAT:
            raise ModelError(f"{folder}: {MODEL_FILE} is not a quality model (format {doc.get('format')!r})")
        if doc.get("format_version") != FORMAT_VERSION:
            raise ModelError(
                f"{folder}: quality model format_version {doc.get('format_version')!r} is not supported "
                f"(this reader knows {FORMAT_VERSION}); retrain it with curation quality-train"
            )
        raw = storage.read_bytes(storage.join(folder, doc["weights_file"]))
        got = StreamChecksum()
        got.update(raw)
        if got.hexdigest() != doc["weights_checksum"]:
            raise ModelError(
                f"{folder}: {doc['weights_file']} has checksum {got.hexdigest()} but {MODEL_FILE} records "
                f"{doc['weights_checksum']}: the folder was changed after training; retrain or restore it"
            )
        import io

        weights = np.load(io.BytesIO(raw), allow_pickle=False)
        features = features_from(doc["features"])
        if weights.shape != (features.size,):
            raise ModelError(f"{folder}: weights of shape {weights.shape}, expected ({features.size},)")
        if isinstance(features, EmbeddingFeatures):
            features = replace(features, model=embed_model or features.model)
            features.verify()
        return cls(features, weights, float(doc["bias"]), doc["labels"], doc.get("training", {}), checksum_bytes(data))


def read_model_json(folder: str) -> bytes:
    try:
        return storage.read_bytes(storage.join(folder, MODEL_FILE))
    except FileNotFoundError:
        raise ModelError(f"no quality model in {folder}: {MODEL_FILE} is missing (train one: curation quality-train)")


def model_checksum(folder: str) -> str:
    """The model's identity without loading its weights: the xxh64 of ``model.json``."""
    return checksum_bytes(read_model_json(folder))


def model_features(folder: str) -> Features | EmbeddingFeatures:
    """The model's features, from ``model.json`` only (no weights read, no embedding model checked)."""
    try:
        return features_from(json.loads(read_model_json(folder))["features"])
    except (KeyError, TypeError, ValueError) as e:
        raise ModelError(f"{folder}: {MODEL_FILE} is unreadable ({e})") from e


def _npy_bytes(a: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


# -- training ------------------------------------------------------------------------------------------
def _binary_labels(values: list[Any], positive: Any | None) -> tuple[np.ndarray, dict[str, Any]]:
    """0/1 targets and which value is which; refuses anything but two distinct labels."""
    if any(v is None for v in values):
        raise ValueError("quality-train: the label column has nulls; every training row needs a label")
    distinct = sorted(set(values), key=str)
    if positive is None:
        if set(distinct) <= {0, 1} or set(distinct) <= {False, True}:
            positive = True if any(isinstance(v, bool) for v in distinct) else 1
        else:
            raise ValueError(f"quality-train: labels {distinct[:10]} are not 0/1: say which is good with --positive")
    else:
        # The flag arrives as text: match it to a label's own type.
        matches = [v for v in distinct if str(v).lower() == str(positive).lower()]
        if not matches:
            raise ValueError(f"quality-train: positive label {positive!r} is not among the labels {distinct[:10]}")
        positive = matches[0]
    if len(distinct) != 2:
        raise ValueError(f"quality-train: need exactly two labels, found {len(distinct)}: {distinct[:10]}")
    negative = next(v for v in distinct if v != positive)
    y = np.fromiter((v == positive for v in values), dtype=np.int8, count=len(values))
    return y, {"positive": positive, "negative": negative}


def auc(y: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (ties count half): the probability that a good row outscores a bad one."""
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, scores))


def train(
    texts: list[str | None],
    labels: list[Any],
    features: Features | EmbeddingFeatures | None = None,
    positive: Any | None = None,
    c: float = 4.0,
    holdout: float = 0.1,
    seed: int = 0,
) -> QualityModel:
    """Fit the model; ``holdout`` of the rows (a seeded draw) are kept out of the fit to measure AUC.

    :param c: inverse L2 strength of the logistic regression.
    """
    from sklearn.linear_model import LogisticRegression

    if len(texts) != len(labels):
        raise ValueError("quality-train: texts and labels differ in length")
    features = features or Features()
    y, label_map = _binary_labels(list(labels), positive)
    if min(int(y.sum()), int(len(y) - y.sum())) < 2:
        raise ValueError("quality-train: need at least two rows of each label")
    started = time.time()
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    n_hold = int(len(y) * holdout) if 0 < holdout < 1 else 0
    hold, fit = order[:n_hold], order[n_hold:]
    if n_hold and len(set(y[hold].tolist())) < 2:  # an AUC needs both labels: draw until it has them
        hold = np.concatenate([np.flatnonzero(y == 0)[:1], np.flatnonzero(y == 1)[:1], hold])[:n_hold]
        fit = np.setdiff1d(order, hold)
    x = features.transform(texts)  # once: an embedding model's forward pass is the cost of training
    if isinstance(features, EmbeddingFeatures):
        features = replace(features, dim=int(x.shape[1]))
    clf = LogisticRegression(C=c, solver="liblinear", random_state=seed, max_iter=1000)
    clf.fit(x[fit], y[fit])
    model = QualityModel(features, clf.coef_.ravel().astype(np.float32), float(clf.intercept_[0]), label_map)
    training = {
        "rows": len(y),
        "positive_rows": int(y.sum()),
        "fit_rows": int(len(fit)),
        "holdout_rows": int(len(hold)),
        "c": c,
        "seed": seed,
        "fit_auc": round(auc(y[fit], model.decision_x(x[fit])), 6),
        "seconds": round(time.time() - started, 3),
    }
    if len(hold):
        training["holdout_auc"] = round(auc(y[hold], model.decision_x(x[hold])), 6)
    model.training = training
    return model


def train_parquet(
    inputs: list[str],
    out: str,
    text_field: str = "text",
    label_field: str = "label",
    positive: Any | None = None,
    features: Features | EmbeddingFeatures | None = None,
    c: float = 4.0,
    holdout: float = 0.1,
    seed: int = 0,
) -> dict[str, Any]:
    """Train from labelled Parquet files (local or fsspec URLs) and save the model in ``out``.

    :returns: what the model folder records about the training, with its checksum.
    """
    import pyarrow as pa

    texts: list[str | None] = []
    labels: list[Any] = []
    for uri in inputs:
        table = storage.read_parquet(uri)
        for name in (text_field, label_field):
            if name not in table.column_names:
                raise ValueError(f"quality-train: {uri} has no column {name!r} (has {table.column_names})")
        if not pa.types.is_string(table.schema.field(text_field).type) and not pa.types.is_large_string(
            table.schema.field(text_field).type
        ):
            raise ValueError(f"quality-train: {uri}: column {text_field!r} must be text")
        texts += table.column(text_field).to_pylist()
        labels += table.column(label_field).to_pylist()
    model = train(texts, labels, features=features, positive=positive, c=c, holdout=holdout, seed=seed)
    model.training["inputs"] = list(inputs)
    model.save(out)
    log.info("quality-train: %d rows, held-out AUC %s, model %s", len(texts), model.training.get("holdout_auc"), out)
    return {"model": out, "checksum": model.checksum, "labels": model.labels, **model.training}
