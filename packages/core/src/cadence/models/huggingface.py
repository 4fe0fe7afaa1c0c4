"""`HuggingFaceModel`: wraps a ``transformers`` model into a `Model` (Composer's ``HuggingFaceModel``).

Batches are dicts (``input_ids``, ``attention_mask``, ``labels``, ...). Only the keys the
wrapped model's ``forward`` names are passed on, in a new dict: the caller's batch is never
changed, so a second metric or a method can still read ``labels`` (Composer #3196).
The loss is the one the HF model computes itself (``outputs.loss``), except when a method has
replaced the labels by dense targets after the forward (label smoothing, mixing): then it is the
soft cross-entropy of the logits against those targets, which the model never saw.

This module imports ``transformers`` only inside functions that need it, so
``import cadence`` works without it installed.
"""

from __future__ import annotations

import copy
import inspect
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import Metric

from cadence.metrics import MulticlassAccuracy, _PlainAttributes
from cadence.models.base import Model
from cadence.ops.targets import soft_cross_entropy

__all__ = ["HuggingFaceModel", "LanguageCrossEntropy", "LanguagePerplexity"]

IGNORE_INDEX = -100  # the label value HF losses skip (padding, prompt tokens)


class LanguageCrossEntropy(_PlainAttributes, Metric):
    """Mean cross-entropy per predicted token, skipping labels equal to `ignore_index`.

    Sums over tokens (not a mean of batch means), so batches with different numbers of real
    tokens are weighted correctly and the result is exact across ranks.
    """

    full_state_update = False
    sum_loss: torch.Tensor  # its states (`add_state`), summed across ranks
    total_tokens: torch.Tensor

    def __init__(self, ignore_index: int = IGNORE_INDEX, **kwargs: Any):
        super().__init__(**kwargs)
        self.ignore_index = ignore_index
        self.add_state("sum_loss", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("total_tokens", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, logits: torch.Tensor, target: torch.Tensor) -> None:  # type: ignore[override]
        """`logits`: (..., vocab); `target`: (...) token ids, already aligned with the logits."""
        logits = logits.reshape(-1, logits.shape[-1]).float()
        target = target.reshape(-1)
        losses = F.cross_entropy(logits, target, ignore_index=self.ignore_index, reduction="sum")
        self.sum_loss += losses.double()
        self.total_tokens += (target != self.ignore_index).sum()

    def compute(self) -> torch.Tensor:
        return (self.sum_loss / self.total_tokens.clamp(min=1)).float()


class LanguagePerplexity(LanguageCrossEntropy):
    """``exp`` of `LanguageCrossEntropy`."""

    def compute(self) -> torch.Tensor:
        return torch.exp(super().compute())


def _is_causal_lm(model: nn.Module) -> bool:
    """True for decoder-only language models, whose labels must be shifted by one token for metrics."""
    name = type(model).__name__
    try:
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    except ImportError:  # transformers moved the table: fall back to the naming convention
        return name.endswith(("ForCausalLM", "LMHeadModel"))
    return name in set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values()) or name.endswith(("ForCausalLM", "LMHeadModel"))


def _forward_arguments(model: nn.Module) -> frozenset[str]:
    """The named parameters of ``model.forward`` (``**kwargs`` catch-alls do not count)."""
    parameters = inspect.signature(model.forward).parameters.values()
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return frozenset(p.name for p in parameters if p.kind in named)


def _as_metric_dict(metrics: Metric | Sequence[Metric] | Mapping[str, Metric] | None, name: str) -> dict[str, Metric]:
    if metrics is None:
        return {}
    if isinstance(metrics, Metric):
        metrics = [metrics]
    if isinstance(metrics, Mapping):
        items = dict(metrics)
    else:
        items = {type(m).__name__: m for m in metrics}
    for key, metric in items.items():
        if not isinstance(metric, Metric):
            raise TypeError(f"{name}[{key!r}] is a {type(metric).__name__}; pass torchmetrics Metric objects")
    return items


class HuggingFaceModel(Model):
    """A ``transformers`` model trained on dict batches, with its own loss.

    Args:
        model: a ``transformers.PreTrainedModel`` (or any module whose forward takes keyword
            tensors and returns an object with ``loss`` and ``logits``).
        tokenizer: kept with the model so it can be saved alongside; not used in training.
        use_logits: ``eval_forward`` returns only the logits tensor instead of the full output.
        metrics: train metrics (a list named by class, or a dict). Default: accuracy for
            sequence classification, cross-entropy and perplexity for language models.
        eval_metrics: evaluation metrics; default: the same as `metrics`.
        shift_labels: score token ``t`` against label ``t + 1`` in metrics. Default: True for
            causal language models (inferred from the model class), False otherwise.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any = None,
        use_logits: bool = False,
        metrics: Metric | Sequence[Metric] | Mapping[str, Metric] | None = None,
        eval_metrics: Metric | Sequence[Metric] | Mapping[str, Metric] | None = None,
        shift_labels: bool | None = None,
    ):
        super().__init__()
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module (a transformers model), got {type(model).__name__}")
        self.model: Any = model  # a transformers model: its methods (generate, ...) are transformers' own
        self.tokenizer = tokenizer
        self.use_logits = use_logits
        self.shift_labels = _is_causal_lm(model) if shift_labels is None else bool(shift_labels)
        self.model_forward_args = _forward_arguments(model)
        self._train_metrics = _as_metric_dict(metrics, "metrics") or self._default_metrics()
        self._eval_metrics = _as_metric_dict(eval_metrics, "eval_metrics") or self._train_metrics
        self._check_vocabulary()

    @property
    def config(self) -> Any:
        return getattr(self.model, "config", None)

    def _default_metrics(self) -> dict[str, Metric]:
        if self.shift_labels or type(self.model).__name__.endswith(("ForMaskedLM", "LMHeadModel", "ForCausalLM")):
            return {"LanguageCrossEntropy": LanguageCrossEntropy(), "LanguagePerplexity": LanguagePerplexity()}
        num_labels = getattr(self.config, "num_labels", None)
        if isinstance(num_labels, int) and num_labels >= 2:
            return {"MulticlassAccuracy": MulticlassAccuracy(num_classes=num_labels, average="micro")}
        return {}

    def _check_vocabulary(self) -> None:
        if self.tokenizer is None or not hasattr(self.model, "get_input_embeddings"):
            return
        embeddings = self.model.get_input_embeddings()
        size = getattr(embeddings, "num_embeddings", None)
        if size is not None and len(self.tokenizer) > size:
            warnings.warn(
                f"the tokenizer has {len(self.tokenizer)} tokens but the model's embedding has {size} rows; "
                "token ids past the embedding will fail. Call model.resize_token_embeddings(len(tokenizer)) first",
                stacklevel=3,
            )

    # Training ---------------------------------------------------------------------------
    def model_inputs(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """A new dict with only the batch entries the wrapped model's forward accepts."""
        if not isinstance(batch, Mapping):
            raise TypeError(
                f"HuggingFaceModel takes dict batches (input_ids, attention_mask, labels, ...), got "
                f"{type(batch).__name__}; use a collate function that returns a dict"
            )
        return {key: value for key, value in batch.items() if key in self.model_forward_args}

    def forward(self, batch: Mapping[str, Any]) -> Any:
        return self.model(**self.model_inputs(batch))

    def loss(self, outputs: Any, batch: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        labels = batch.get("labels") if isinstance(batch, Mapping) else None
        if isinstance(labels, torch.Tensor) and labels.is_floating_point() and not self.shift_labels:
            logits = _logits(outputs)  # dense labels set after the forward: the model's own loss used others
            if labels.shape == logits.shape:
                classes = logits.shape[-1]
                return soft_cross_entropy(logits.reshape(-1, classes), labels.reshape(-1, classes), *args, **kwargs)
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else getattr(outputs, "loss", None)
        if loss is None:
            raise ValueError(
                "the HuggingFace model returned no loss: the batch needs a 'labels' entry "
                f"(batch keys: {sorted(batch) if isinstance(batch, Mapping) else type(batch).__name__})"
            )
        return loss

    # Evaluation -------------------------------------------------------------------------
    def eval_forward(self, batch: Any, outputs: Any | None = None) -> Any:
        outputs = outputs if outputs is not None else self.forward(batch)
        return _logits(outputs) if self.use_logits else outputs

    def get_metrics(self, is_train: bool = False) -> dict[str, Metric]:
        chosen = self._train_metrics if is_train else self._eval_metrics
        return {name: copy.deepcopy(metric) for name, metric in chosen.items()}

    def update_metric(self, batch: Any, outputs: Any, metric: Metric) -> None:
        logits = _logits(outputs).detach()
        labels = batch["labels"]
        if self.shift_labels:  # token t predicts token t + 1
            logits, labels = logits[..., :-1, :], labels[..., 1:]
        if isinstance(metric, LanguageCrossEntropy):
            metric.update(logits, labels)
            return
        if labels.is_floating_point() and labels.shape == logits.shape:
            labels = labels.argmax(dim=-1)  # dense (smoothed or mixed) targets: score the main class
        if logits.dim() > 2:  # one prediction per token: torchmetrics wants classes in dim 1, so flatten
            logits, labels = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
        metric.update(logits, labels)


def _logits(outputs: Any) -> torch.Tensor:
    if isinstance(outputs, torch.Tensor):
        return outputs
    logits = outputs.get("logits") if isinstance(outputs, Mapping) else getattr(outputs, "logits", None)
    if logits is None:
        raise ValueError(f"cannot find logits in the model output of type {type(outputs).__name__}")
    return logits
