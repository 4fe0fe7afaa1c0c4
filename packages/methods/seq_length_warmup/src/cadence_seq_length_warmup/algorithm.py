"""`SeqLengthWarmup`: the Event adapter over `warmup_seq_length` and `set_batch_sequence_length`."""

from __future__ import annotations

from typing import Any

from cadence import Effects, Event, NotApplicableError, Resource, State
from cadence.ops import Method
from cadence_seq_length_warmup.functional import (
    check_seq_length_warmup_args,
    set_batch_sequence_length,
    warmup_seq_length,
)

__all__ = ["SeqLengthWarmup"]


class SeqLengthWarmup(Method):
    """Trains on short sequences first: on AFTER_DATALOADER each batch gets the scheduled length.

    Schedule: `warmup_seq_length` over the first ``duration`` of the run, counted in batches
    (``ep``/``ba`` runs, as Composer) or in the run's own unit (``sp``/``tok`` runs); a pure
    function of the timestamp, so there is no state to checkpoint. Batches: `set_batch_sequence_length`.
    """

    events = (Event.AFTER_DATALOADER,)
    order = 10  # innermost on AFTER_DATALOADER: Selective Backprop (100) scores the whole sequences first

    def __init__(
        self,
        duration: float = 0.3,
        min_seq_length: int = 8,
        max_seq_length: int = 1024,
        step_size: int = 8,
        truncate: bool = True,
        preserve_end_of_sequence: bool = False,
    ):
        check_seq_length_warmup_args(
            duration, min_seq_length, max_seq_length, step_size, truncate, preserve_end_of_sequence
        )
        self.duration, self.min_seq_length, self.max_seq_length = duration, min_seq_length, max_seq_length
        self.step_size, self.truncate, self.preserve_end_of_sequence = step_size, truncate, preserve_end_of_sequence

    def seq_length(self, state: State) -> int:
        """The length of the batch about to train, from the timestamp and ``max_duration`` only."""
        if state.max_duration is None:
            raise ValueError("SeqLengthWarmup follows a schedule over the run: set the Trainer's max_duration")
        if state.max_batches is not None:
            elapsed, total = state.timestamp.batch, state.max_batches
        else:  # sp or tok: the warmup is that share of the samples or tokens
            elapsed, total = state.timestamp.get(state.max_duration.unit), int(state.max_duration.value)
        warmup = int(total * self.duration)
        return warmup_seq_length(elapsed, warmup, self.min_seq_length, self.max_seq_length, self.step_size)

    def apply(self, event: Event, state: State, logger: Any) -> None:
        length = self.seq_length(state)
        state.batch = set_batch_sequence_length(state.batch, length, self.truncate, self.preserve_end_of_sequence)
        batch_size = state.batch["input_ids"].shape[0]  # grows when truncate=False cuts sequences into pieces
        logger.log_metrics({"seq_length_warmup/curr_seq_len": length, "seq_length_warmup/curr_bs": batch_size})

    def effects(self) -> Effects:
        touched = {Resource.INPUTS, Resource.TARGETS}
        return Effects(reads=touched | {Resource.DURATION}, writes=touched)  # the length follows the run's progress

    def check_applicable(self, model: Any, batch: Any) -> None:
        try:  # the shortest length runs every check the batches must pass
            set_batch_sequence_length(batch, 1, self.truncate, self.preserve_end_of_sequence)
        except (TypeError, ValueError) as error:
            raise NotApplicableError(f"{self.name} cannot shorten these batches: {error}") from None
