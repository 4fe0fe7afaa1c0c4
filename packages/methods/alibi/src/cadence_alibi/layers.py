"""ALiBi's modules: self-attention that adds linear biases, and a position embedding that adds nothing.

`apply_alibi` puts them into HuggingFace BERT, RoBERTa and GPT-2 models; a model built by hand
uses them the same way. The bias reaches the attention scores through the attention mask: HF's
"eager" attention adds the mask to the scores and its "sdpa" attention hands it to
``scaled_dot_product_attention`` as ``attn_mask``, which does the same. Kernels that take no
additive mask (flash attention, flex attention) cannot carry the bias and are refused.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

__all__ = [
    "ATTENTION_IMPLEMENTATIONS",
    "AlibiAttention",
    "NoPositionEmbedding",
    "add_alibi_bias",
    "alibi_bias",
    "alibi_slopes",
]

ATTENTION_IMPLEMENTATIONS = ("eager", "sdpa")
"""HF attention implementations that add the attention mask to the scores."""


def alibi_slopes(num_heads: int) -> list[float]:
    """The head slopes of Press et al. (2022): ``2 ** (-8 h / n)`` for heads h = 1..n when n is a power
    of two. Otherwise the slopes for the power of two p below n, then every other slope for 2p
    until there are n (the paper's rule: the slopes keep interleaving the geometric sequence)."""

    def powers(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    below = 2 ** math.floor(math.log2(num_heads))
    return powers(below) + powers(2 * below)[0::2][: num_heads - below]


def alibi_bias(slopes: torch.Tensor, query_length: int, key_length: int) -> torch.Tensor:
    """The ``(1, H, Q, K)`` bias ``-m_h |i - j|`` between query position i and key position j.

    Queries are the last `query_length` positions (a KV cache holds the first ones). The same
    formula serves causal models: there the keys after the query are masked anyway, so the bias
    is the paper's ``-m_h (i - j)`` for every key a query can see.
    """
    keys = torch.arange(key_length, device=slopes.device)
    queries = keys[key_length - query_length :]
    distance = (queries[:, None] - keys[None, :]).abs()
    return (-slopes[:, None, None] * distance).unsqueeze(0)


def add_alibi_bias(attention_mask: torch.Tensor | None, bias: torch.Tensor, causal: bool) -> torch.Tensor:
    """HF's 4-D attention mask with `bias` added, as the additive float mask both eager and SDPA take.

    `attention_mask` is what HF passes to its attention modules: None (nothing masked; a causal
    model then relies on SDPA's ``is_causal``, so the causal mask is built here), a boolean mask
    (True = attend, causality included) or an additive float mask (0 or the dtype's minimum).
    """
    if attention_mask is not None and attention_mask.is_floating_point():
        return attention_mask + bias.to(attention_mask.dtype)
    allowed = attention_mask
    if allowed is None and causal:
        query_length, key_length = bias.shape[-2:]
        keys = torch.arange(key_length, device=bias.device)
        allowed = keys[None, :] <= keys[key_length - query_length :, None]
    if allowed is None:
        return bias
    return torch.where(allowed, bias, torch.finfo(bias.dtype).min)


class AlibiAttention(nn.Module):
    """A HuggingFace self-attention module whose attention scores get ALiBi's per-head linear bias.

    It wraps the module (weights, optimizer state and checkpoint entries stay the module's, under
    ``attention.``) and adds `alibi_bias` to the attention mask it is called with. The wrapped
    module's own code computes the attention, so HF's eager and SDPA paths, KV caches and
    ``output_attentions`` keep working.

    Args:
        attention: an HF self-attention module (``BertSelfAttention``, ``GPT2Attention``, ...) called
            with keyword arguments, ``attention_mask`` among them.
        num_heads: its number of heads (one slope each).
        max_sequence_length: the longest key sequence accepted; a longer one raises ValueError.
        causal: the model attends only to earlier tokens (GPT-2, BERT as a decoder). Needed when HF
            passes no mask and would let SDPA apply the causal mask itself.
    """

    slopes: torch.Tensor  # a buffer

    def __init__(self, attention: nn.Module, num_heads: int, max_sequence_length: int, causal: bool):
        super().__init__()
        self.attention = attention
        self.max_sequence_length = max_sequence_length
        self.causal = causal
        # follows the model's device and dtype; not in checkpoints (a function of num_heads)
        self.register_buffer("slopes", torch.tensor(alibi_slopes(num_heads)), persistent=False)
        self.train(attention.training)  # surgery on a model in eval mode leaves it in eval mode

    def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if args:
            raise TypeError("AlibiAttention passes the attention's arguments on by keyword (attention_mask=...)")
        implementation = getattr(getattr(self.attention, "config", None), "_attn_implementation", "eager")
        if implementation not in ATTENTION_IMPLEMENTATIONS:
            raise ValueError(
                f"ALiBi adds its bias to the attention mask, which attn_implementation={implementation!r} of "
                f"{type(self.attention).__name__} cannot take; use 'sdpa' or 'eager' (model.set_attn_implementation)"
            )
        mask = kwargs.get("attention_mask")
        if mask is not None and mask.ndim != 4:
            raise ValueError(f"AlibiAttention takes HF's 4-D attention masks (B, 1, Q, K), got {tuple(mask.shape)}")
        query_length = hidden_states.shape[-2]
        key_length = mask.shape[-1] if mask is not None else query_length + self._cached(kwargs)
        if key_length > self.max_sequence_length:
            raise ValueError(
                f"a sequence of {key_length} tokens is longer than ALiBi's max_sequence_length="
                f"{self.max_sequence_length}; apply ALiBi with a larger max_sequence_length"
            )
        bias = alibi_bias(self.slopes.to(hidden_states.dtype), query_length, key_length)
        kwargs["attention_mask"] = add_alibi_bias(mask, bias, self.causal)
        return self.attention(hidden_states, **kwargs)

    def _cached(self, kwargs: dict[str, Any]) -> int:
        """Tokens this layer's KV cache already holds (0 without a cache). transformers 5.24 renamed the
        layers' ``past_key_values`` argument to ``cache``; both are read."""
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        if cache is None or not hasattr(cache, "get_seq_length"):
            return 0
        return int(cache.get_seq_length(getattr(self.attention, "layer_idx", None) or 0))

    def extra_repr(self) -> str:
        return f"heads={len(self.slopes)}, max_sequence_length={self.max_sequence_length}, causal={self.causal}"


class NoPositionEmbedding(nn.Module):
    """Stands where a learned position embedding was, holds no parameters and adds nothing (a zero).

    ALiBi encodes positions in the attention scores instead; keeping a module in the embedding's
    place leaves the model's own forward code unchanged, and the zero broadcasts over any length.
    """

    def __init__(self, embedding_dim: int):
        super().__init__()
        self.embedding_dim = embedding_dim

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        return torch.zeros((), device=position_ids.device)

    def extra_repr(self) -> str:
        return f"embedding_dim={self.embedding_dim}"
