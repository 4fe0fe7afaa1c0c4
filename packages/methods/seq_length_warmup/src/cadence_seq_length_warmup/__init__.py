"""Sequence Length Warmup for cadence (Li et al., 2022): train on short sequences first, then longer ones.

`set_batch_sequence_length` and `warmup_seq_length` are the functions for your own training loop;
`SeqLengthWarmup` is the method for `cadence.Trainer`.
"""

from cadence_seq_length_warmup.algorithm import SeqLengthWarmup
from cadence_seq_length_warmup.functional import set_batch_sequence_length, warmup_seq_length

__all__ = ["SeqLengthWarmup", "set_batch_sequence_length", "warmup_seq_length"]
