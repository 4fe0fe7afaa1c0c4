"""Gated Linear Units (Shazeer, 2020) as a model surgery on HuggingFace transformers. Torch only.

BERT-family feed-forward blocks (``BertIntermediate`` + ``BertOutput``, and RoBERTa's) become
``Identity`` + `BERTGatedFFOutput`, as in Composer; GPT-2 MLPs (``GPT2MLP``, which Composer does not
handle) become `GPT2GatedMLP`. Modules are recognised by class name: transformers is never imported.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

import torch
from torch import nn

from cadence.ops.checks import check_bool, check_callable
from cadence.ops.surgery import Policy, SurgeryReport, replace_modules, unwrap_model
from cadence_gated_linear_units.layers import Activation, BERTGatedFFOutput, GPT2GatedMLP

__all__ = [
    "BERT_FEED_FORWARDS",
    "GPT2_MLPS",
    "apply_gated_linear_units",
    "check_gated_linear_units_args",
    "check_gated_linear_units_model",
]

BERT_FEED_FORWARDS = {"BertIntermediate": "BertOutput", "RobertaIntermediate": "RobertaOutput"}
"""BERT-family feed-forward blocks: the intermediate class and the output class of one layer."""

GPT2_MLPS = ("GPT2MLP",)
"""GPT-2 MLP classes."""


def check_gated_linear_units_args(
    act_fn: Callable[[torch.Tensor], torch.Tensor] | None, gated_layer_bias: bool, non_gated_layer_bias: bool
) -> None:
    """Reject arguments that cannot work, naming the argument."""
    if act_fn is not None:
        check_callable("act_fn", act_fn, arguments=1, signature="(tensor) -> tensor", hint="e.g. nn.GELU()")
    check_bool("gated_layer_bias", gated_layer_bias)
    check_bool("non_gated_layer_bias", non_gated_layer_bias)


def _feed_forwards(model: nn.Module) -> list[tuple[nn.Module, nn.Module]]:
    """(intermediate, output) of every transformer layer that holds a BERT-family feed-forward block."""
    pairs: list[tuple[nn.Module, nn.Module]] = []
    for layer in model.modules():
        intermediate, output = getattr(layer, "intermediate", None), getattr(layer, "output", None)
        if intermediate is None or output is None:
            continue
        if BERT_FEED_FORWARDS.get(type(intermediate).__name__) == type(output).__name__:
            pairs.append((intermediate, output))
    return pairs


def check_gated_linear_units_model(model: nn.Module) -> None:
    """Raise ValueError if `model` has no feed-forward block this surgery knows (and none it made)."""
    target = unwrap_model(model)
    known = (BERTGatedFFOutput, GPT2GatedMLP)
    if _feed_forwards(target) or any(type(m).__name__ in GPT2_MLPS or isinstance(m, known) for m in target.modules()):
        return
    inner = getattr(target, "model", None)  # cadence's HuggingFaceModel holds the transformers model there
    name = type(inner if isinstance(inner, nn.Module) else target).__name__
    blocks = ", ".join([*(f"{a} + {b}" for a, b in BERT_FEED_FORWARDS.items()), *GPT2_MLPS])
    raise ValueError(
        f"{name} has no feed-forward block Gated Linear Units can replace: it works on HuggingFace BERT-family "
        f"and GPT-2 models ({blocks})"
    )


def apply_gated_linear_units(
    model: nn.Module,
    optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None,
    act_fn: Callable[[torch.Tensor], torch.Tensor] | None = None,
    gated_layer_bias: bool = False,
    non_gated_layer_bias: bool = False,
    *,
    strict: bool = False,
) -> SurgeryReport:
    """Replace the feed-forward blocks of `model` by gated linear units, in place.

    Each block keeps its widths (``d_ff`` is not scaled to keep the parameter count: the gate adds
    one ``d_embed x d_ff`` matrix per block), its output projection, dropout and (BERT) LayerNorm;
    the gate's two projections are new (PyTorch's default ``nn.Linear`` initialisation). The old
    first projection leaves the model and the optimizers.

    Args:
        model: a HuggingFace BERT, RoBERTa or GPT-2 model, or a `cadence.HuggingFaceModel`.
        optimizers: optimizers already built on the model's parameters (None if built afterwards):
            kept parameters keep their place and state, new ones join their block's parameter group.
        act_fn: the gate's activation; None uses each block's own (BERT's ``hidden_act``, GPT-2's
            ``activation_function``). Composer recommends GELU or ReLU.
        gated_layer_bias: a bias in the gate's projection ``W_g`` (Composer: better without).
        non_gated_layer_bias: a bias in the non-gated projection ``W_ng``.
        strict: raise `NoEffectError` instead of warning `NoEffectWarning` when nothing matched.

    Returns:
        The `SurgeryReport`.
    """
    check_gated_linear_units_args(act_fn, gated_layer_bias, non_gated_layer_bias)
    check_bool("strict", strict)
    target = unwrap_model(model)
    biases = (gated_layer_bias, non_gated_layer_bias)
    pairs = _feed_forwards(target)
    intermediate_of = {id(output): intermediate for intermediate, output in pairs}
    intermediates = {id(intermediate) for intermediate, _ in pairs}

    def identity(module: nn.Module, path: str) -> nn.Module | None:
        return nn.Identity().train(module.training) if id(module) in intermediates else None  # the gated block does it

    def bert_output(module: nn.Module, path: str) -> nn.Module | None:
        intermediate = intermediate_of.get(id(module))
        if intermediate is None:
            return None
        activation = act_fn or cast(Activation, intermediate.intermediate_act_fn)  # HF's: a function or a module
        return BERTGatedFFOutput.from_bert_output(module, activation, *biases)

    def gpt2_mlp(module: nn.Module, path: str) -> nn.Module:
        return GPT2GatedMLP.from_gpt2_mlp(module, act_fn or cast(Activation, module.act), *biases)  # as above

    policies: dict[type[nn.Module], Policy] = {
        type(m): gpt2_mlp for m in target.modules() if type(m).__name__ in GPT2_MLPS
    }
    for intermediate, output in pairs:
        policies[type(intermediate)], policies[type(output)] = identity, bert_output
    return replace_modules(target, policies, optimizers=optimizers, method="GatedLinearUnits", strict=strict)
