"""Gated Linear Units (Shazeer, 2020): gated feed-forward blocks in HuggingFace BERT-family and GPT-2 models.

`apply_gated_linear_units` is the surgery for your own loop; `GatedLinearUnits` runs it for
`cadence.Trainer`. The modules, `BERTGatedFFOutput` and `GPT2GatedMLP`, are in `cadence_gated_linear_units.layers`.
"""

from cadence_gated_linear_units.algorithm import GatedLinearUnits
from cadence_gated_linear_units.functional import apply_gated_linear_units, check_gated_linear_units_model
from cadence_gated_linear_units.layers import BERTGatedFFOutput, GPT2GatedMLP

__all__ = [
    "BERTGatedFFOutput",
    "GPT2GatedMLP",
    "GatedLinearUnits",
    "apply_gated_linear_units",
    "check_gated_linear_units_model",
]
