"""ALiBi (Press et al., 2022): attention with linear biases instead of position embeddings.

`apply_alibi` changes a HuggingFace BERT, RoBERTa or GPT-2 model; `scale_sequence_length` trains it
on shorter sequences; `Alibi` does both for `cadence.Trainer`. The modules are in `cadence_alibi.layers`.
"""

from cadence_alibi.algorithm import Alibi
from cadence_alibi.functional import apply_alibi, check_alibi_model, scale_sequence_length
from cadence_alibi.layers import AlibiAttention, NoPositionEmbedding, alibi_bias, alibi_slopes

__all__ = [
    "Alibi",
    "AlibiAttention",
    "NoPositionEmbedding",
    "alibi_bias",
    "alibi_slopes",
    "apply_alibi",
    "check_alibi_model",
    "scale_sequence_length",
]
