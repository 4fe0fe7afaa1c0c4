"""ALiBi (Press et al., 2022) as functions: the model surgery and the batch reshape. Torch only.

ALiBi drops learned position embeddings and biases each head's attention scores by ``-m_h`` times
the query-key distance, which lets a model trained on short sequences evaluate on longer ones.
`apply_alibi` does this to HuggingFace BERT, RoBERTa and GPT-2 models, recognised by their class
names (transformers is never imported); `scale_sequence_length` cuts every training sequence into
shorter ones, which is where the time is saved (attention costs grow with the length squared).
"""

from __future__ import annotations

import importlib.metadata
import math
from collections.abc import Mapping, Sequence
from typing import Any, cast

import torch
from torch import nn

from cadence.ops.checks import check_bool, check_int, check_number
from cadence.ops.surgery import Policy, SurgeryReport, policy_for, replace_modules, unwrap_model
from cadence_alibi.layers import ATTENTION_IMPLEMENTATIONS, AlibiAttention, NoPositionEmbedding

__all__ = [
    "POSITION_EMBEDDINGS",
    "SELF_ATTENTION",
    "apply_alibi",
    "check_alibi_args",
    "check_alibi_model",
    "scale_sequence_length",
]

SELF_ATTENTION = ("BertSelfAttention", "RobertaSelfAttention", "GPT2Attention")
"""The HuggingFace self-attention classes ALiBi wraps (cross-attention is left alone)."""

POSITION_EMBEDDINGS = {
    "BertEmbeddings": "position_embeddings",
    "RobertaEmbeddings": "position_embeddings",
    "GPT2Model": "wpe",
}
"""The HuggingFace modules holding a learned position embedding, and its attribute name."""


def check_alibi_args(max_sequence_length: int, train_sequence_length_scaling: float = 0.25) -> None:
    """Reject hyperparameters that cannot work, naming the argument and the allowed range."""
    check_int("max_sequence_length", max_sequence_length, ge=1, hint="the longest sequence the model will accept")
    check_number(
        "train_sequence_length_scaling", train_sequence_length_scaling, gt=0, hint="0.25 trains on 1/4 of the length"
    )


def _model_name(model: nn.Module) -> str:
    inner = getattr(model, "model", None)  # cadence's HuggingFaceModel holds the transformers model there
    return type(inner if isinstance(inner, nn.Module) else model).__name__


def _attentions(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if type(m).__name__ in SELF_ATTENTION]


def _transformers_version() -> str | None:
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return None


def check_alibi_model(model: nn.Module) -> None:
    """Raise ValueError if ALiBi cannot work on `model`: it has no self-attention ALiBi knows, one whose
    attention implementation cannot add a bias (flash or flex attention), or transformers is older
    than 5 (its attention modules take positional arguments and masks of a fixed size)."""
    target = unwrap_model(model)
    attentions = _attentions(target)
    version = _transformers_version()
    if version is not None and int(version.split(".")[0]) < 5:
        raise ValueError(f"ALiBi works with the attention code of transformers >= 5; {version} is installed")
    if not attentions:
        raise ValueError(
            f"{_model_name(target)} has no self-attention ALiBi can bias: it works on HuggingFace BERT, RoBERTa "
            f"and GPT-2 models ({', '.join(SELF_ATTENTION)})"
        )
    for attention in attentions:
        implementation = getattr(getattr(attention, "config", None), "_attn_implementation", "eager")
        if implementation not in ATTENTION_IMPLEMENTATIONS:
            raise ValueError(
                f"{_model_name(target)} runs {type(attention).__name__} with attn_implementation="
                f"{implementation!r}, which cannot add ALiBi's bias to the attention scores; load it with "
                f"attn_implementation='sdpa' or 'eager' (or call model.set_attn_implementation('sdpa'))"
            )


def apply_alibi(
    model: nn.Module,
    max_sequence_length: int,
    optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None = None,
    *,
    strict: bool = False,
) -> SurgeryReport:
    """Replace learned position embeddings by ALiBi's attention biases, in place.

    Every BERT/RoBERTa/GPT-2 self-attention module is wrapped in an `AlibiAttention` (its weights
    kept), and every learned position embedding is replaced by a `NoPositionEmbedding`: its
    parameter leaves the model and the optimizers. BERT and RoBERTa embeddings also lose the
    token-type buffer that limits their inputs to ``max_position_embeddings`` tokens.

    Args:
        model: the model to change, e.g. a ``BertForMaskedLM``, ``GPT2LMHeadModel`` or a
            `cadence.HuggingFaceModel` holding one.
        max_sequence_length: the longest sequence the model accepts afterwards; may exceed the
            model's ``max_position_embeddings``. A longer one raises ValueError.
        optimizers: optimizers already built on the model's parameters: rebound (the removed
            position embeddings leave them, every other parameter keeps its place and state).
        strict: raise `NoEffectError` instead of warning `NoEffectWarning` when nothing matched.

    Returns:
        The `SurgeryReport`. Raises ValueError where the attention cannot take a bias.
    """
    check_alibi_args(max_sequence_length)
    check_bool("strict", strict)
    target = unwrap_model(model)
    attentions = _attentions(target)
    positions: dict[str, nn.Embedding] = {  # path -> the learned position embedding there
        f"{path}.{name}".lstrip("."): getattr(m, name)
        for path, m in target.named_modules()
        if (name := POSITION_EMBEDDINGS.get(type(m).__name__)) and isinstance(getattr(m, name, None), nn.Embedding)
    }
    if attentions or positions:  # never remove positions without adding the bias
        check_alibi_model(target)

    def attention(module: nn.Module, path: str) -> nn.Module | None:
        if getattr(module, "is_cross_attention", False):
            return None
        heads = getattr(module, "num_attention_heads", None) or cast(int, module.num_heads)  # GPT2Attention's int
        return AlibiAttention(module, int(heads), max_sequence_length, bool(getattr(module, "is_causal", False)))

    def embedding(module: nn.Embedding, path: str) -> nn.Module | None:
        return NoPositionEmbedding(module.embedding_dim).train(module.training) if path in positions else None

    policies: dict[type[nn.Module], Policy] = {type(m): attention for m in attentions}
    policies.update({type(m): policy_for(type(m), embedding) for m in positions.values()})
    report = replace_modules(target, policies, optimizers=optimizers, method="Alibi", strict=strict)
    for module in target.modules():
        if type(module).__name__ in ("BertEmbeddings", "RobertaEmbeddings"):
            _drop_token_type_buffer(module)
    return report


def _drop_token_type_buffer(embeddings: nn.Module) -> None:
    """BERT and RoBERTa embeddings read missing token types from a buffer as long as
    ``max_position_embeddings``; without it they use zeros of the input's length (their own
    fallback), so any length reaches the attention, which enforces `max_sequence_length`."""
    if isinstance(getattr(embeddings, "token_type_ids", None), torch.Tensor):
        delattr(embeddings, "token_type_ids")


def scale_sequence_length(
    batch: Mapping[str, Any], train_sequence_length_scaling: float = 0.25
) -> dict[str, torch.Tensor]:
    """Reshape every ``(B, S)`` tensor of a dict batch to ``(B / scaling, S * scaling)``.

    With a scaling below 1 each row is cut into ``1 / scaling`` consecutive pieces: the same tokens
    in the same order, in shorter sequences (Composer's ``Alibi`` does this on AFTER_DATALOADER).
    Returns a new dict of views; the caller's batch is unchanged.

    Raises:
        TypeError: `batch` is not a dict.
        ValueError: an entry is not a ``(B, S)`` tensor (e.g. per-sequence class labels, which cannot
            be split), or ``B / scaling`` or ``S * scaling`` is not a whole number.
    """
    scaling = check_number("train_sequence_length_scaling", train_sequence_length_scaling, gt=0)
    if not isinstance(batch, Mapping):
        raise TypeError(
            f"ALiBi's train_sequence_length_scaling reshapes dict batches (input_ids, attention_mask, labels, ...), "
            f"got a {type(batch).__name__}; use train_sequence_length_scaling=1.0 to leave batches alone"
        )
    if scaling == 1:
        return dict(batch)
    reshaped = {}
    for key, value in batch.items():
        if not isinstance(value, torch.Tensor) or value.ndim != 2:
            shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise ValueError(
                f"train_sequence_length_scaling={scaling:g} reshapes every batch entry (B, S), but {key!r} is "
                f"{shape}; per-sequence labels cannot be split: use train_sequence_length_scaling=1.0"
            )
        rows, length = value.shape
        new_rows, new_length = rows / scaling, length * scaling
        for name, size, new in (("batch size", rows, new_rows), ("sequence length", length, new_length)):
            if not math.isclose(new, round(new), rel_tol=0, abs_tol=1e-6):
                raise ValueError(
                    f"{key!r} has {name} {size}, and {size} with train_sequence_length_scaling={scaling:g} gives "
                    f"{new:g}, not a whole number; choose sizes and a scaling that divide evenly"
                )
        reshaped[key] = value.reshape(round(new_rows), round(new_length))
    return reshaped
