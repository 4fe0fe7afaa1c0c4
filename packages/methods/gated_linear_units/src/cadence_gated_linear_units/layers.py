"""Gated feed-forward blocks (Shazeer, 2020): ``act(x W_g) * (x W_ng)`` replaces ``act(x W_1)``.

The gate lets each hidden unit scale another, input-dependent one, which trains faster per step
than a plain activation for about one more weight matrix. `apply_gated_linear_units` puts these
modules into HuggingFace BERT-family and GPT-2 models; models built by hand use them the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch
from torch import nn

__all__ = ["BERTGatedFFOutput", "GPT2GatedMLP"]

Activation = Callable[[torch.Tensor], torch.Tensor]


class BERTGatedFFOutput(nn.Module):
    """A BERT feed-forward block with a gated linear unit (Composer's layer, same names and formula):
    ``LayerNorm(dropout(act(x W_g) * (x W_ng)) W_o + b_o + residual)``.

    It replaces ``BertOutput``; ``BertIntermediate`` becomes an ``nn.Identity``, so `hidden_states`
    and `residual_connection` are both the attention block's output.

    Args:
        d_embed: the model width.
        d_ff: the feed-forward width (of both the gated and the non-gated projection).
        dropout_rate: dropout on the gated hidden units.
        act_fn: the activation applied to the gate, e.g. ``nn.GELU()``.
        layernorm_eps: the LayerNorm's epsilon.
        gated_layer_bias: a bias in the gate's projection ``W_g``.
        non_gated_layer_bias: a bias in the non-gated projection ``W_ng``.
    """

    def __init__(
        self,
        d_embed: int,
        d_ff: int,
        dropout_rate: float,
        act_fn: Activation,
        layernorm_eps: float,
        gated_layer_bias: bool = False,
        non_gated_layer_bias: bool = False,
    ):
        super().__init__()
        self.gated_layer = nn.Linear(d_embed, d_ff, bias=gated_layer_bias)
        self.non_gated_layer = nn.Linear(d_embed, d_ff, bias=non_gated_layer_bias)
        self.wo = nn.Linear(d_ff, d_embed)
        self.dropout = nn.Dropout(dropout_rate)
        self.act = act_fn
        self.layernorm = nn.LayerNorm(d_embed, eps=layernorm_eps)

    @classmethod
    def from_bert_output(
        cls, output: nn.Module, act_fn: Activation, gated_layer_bias: bool = False, non_gated_layer_bias: bool = False
    ) -> BERTGatedFFOutput:
        """The gated block for a ``BertOutput``: new gate projections; the block's own output projection,
        dropout and LayerNorm (same role, same shape) are kept, with their weights and optimizer state."""
        # what HF's BertOutput holds (transformers is not imported, so the checker cannot see it)
        dense, dropout = cast(nn.Linear, output.dense), cast(nn.Dropout, output.dropout)
        layernorm = cast(nn.LayerNorm, output.LayerNorm)
        d_embed, d_ff = dense.out_features, dense.in_features
        block = cls(d_embed, d_ff, dropout.p, act_fn, layernorm.eps, gated_layer_bias, non_gated_layer_bias)
        block.wo, block.dropout, block.layernorm = dense, dropout, layernorm
        return block.train(output.training)  # a model in eval mode stays in eval mode

    def forward(self, hidden_states: torch.Tensor, residual_connection: torch.Tensor) -> torch.Tensor:
        gated = self.act(self.gated_layer(hidden_states)) * self.non_gated_layer(hidden_states)
        return self.layernorm(self.wo(self.dropout(gated)) + residual_connection)


class GPT2GatedMLP(nn.Module):
    """GPT-2's MLP with a gated linear unit: ``dropout((act(x W_g) * (x W_ng)) W_o + b_o)``.

    Args:
        d_embed: the model width.
        d_ff: the MLP width.
        dropout_rate: dropout on the block's output (where ``GPT2MLP`` has it).
        act_fn: the activation applied to the gate.
        gated_layer_bias: a bias in ``W_g``.
        non_gated_layer_bias: a bias in ``W_ng``.
    """

    def __init__(
        self,
        d_embed: int,
        d_ff: int,
        dropout_rate: float,
        act_fn: Activation,
        gated_layer_bias: bool = False,
        non_gated_layer_bias: bool = False,
    ):
        super().__init__()
        self.gated_layer = nn.Linear(d_embed, d_ff, bias=gated_layer_bias)
        self.non_gated_layer = nn.Linear(d_embed, d_ff, bias=non_gated_layer_bias)
        self.wo: nn.Module = nn.Linear(d_ff, d_embed)
        self.dropout = nn.Dropout(dropout_rate)
        self.act = act_fn

    @classmethod
    def from_gpt2_mlp(
        cls, mlp: nn.Module, act_fn: Activation, gated_layer_bias: bool = False, non_gated_layer_bias: bool = False
    ) -> GPT2GatedMLP:
        """The gated MLP for a ``GPT2MLP``: new gate projections; its output projection ``c_proj`` (a
        transformers ``Conv1D``) and dropout are kept, with their weights and optimizer state."""
        d_embed, d_ff = mlp.get_parameter("c_fc.weight").shape  # Conv1D stores (in, out)
        dropout = cast(nn.Dropout, mlp.dropout)  # what HF's GPT2MLP holds (the checker cannot see it)
        block = cls(d_embed, d_ff, dropout.p, act_fn, gated_layer_bias, non_gated_layer_bias)
        block.wo, block.dropout = mlp.get_submodule("c_proj"), dropout
        return block.train(mlp.training)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        gated = self.act(self.gated_layer(hidden_states)) * self.non_gated_layer(hidden_states)
        return self.dropout(self.wo(gated))
