"""Events: the named points of the training loop where methods and callbacks run.

The whole loop, with every event where it fires (``Trainer.fit``)::

    INIT                                  # once, in Trainer.__init__: model surgery goes here
    BEFORE_LOAD; <load checkpoint>; AFTER_LOAD
    FIT_START
    while not done:
        EPOCH_START                       # only when an epoch begins (not on a mid-epoch resume)
        for batch in dataloader:
            BEFORE_DATALOADER; <next(loader)>; AFTER_DATALOADER   # batch is on the device here
            BATCH_START
            BEFORE_TRAIN_BATCH
            for microbatch in batch:      # device_train_microbatch_size
                BEFORE_FORWARD; <outputs = model(batch)>; AFTER_FORWARD
                BEFORE_LOSS; <loss = model.loss(outputs, batch)>; AFTER_LOSS
                BEFORE_BACKWARD; <loss.backward()>; AFTER_BACKWARD
            AFTER_TRAIN_BATCH             # gradients complete and unscaled; before optimizer.step()
            <optimizer.step(); timestamp += 1 batch; schedulers.step()>
            BATCH_END
            <evaluation, if due: EVAL_START ... EVAL_END>
            BATCH_CHECKPOINT                  # methods; <checkpoint, if due>; callbacks
        EPOCH_END
        <evaluation, if due>
        EPOCH_CHECKPOINT                      # methods; <checkpoint, if due>; callbacks
    <evaluation, if not done at this batch>
    FIT_END                               # methods; <checkpoint, if not written at this batch>; callbacks

    EVAL_START
    for batch in eval_dataloader:
        EVAL_BATCH_START; EVAL_BEFORE_FORWARD; <outputs = model.eval_forward(batch)>
        EVAL_AFTER_FORWARD; <metrics updated>; EVAL_BATCH_END
    EVAL_END

Forward, loss and backward events fire once per microbatch. The engine runs the
methods matched on an ``AFTER_*`` event in reverse order, so a method that changes
something on ``BEFORE_x`` and restores it on ``AFTER_x`` nests like a context manager.
On BATCH_CHECKPOINT, EPOCH_CHECKPOINT and FIT_END a checkpoint, when one is due, is written
after the methods (``state.checkpoint_due`` is True for them) and before the callbacks.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["Event"]


class Event(str, Enum):
    """A point in the training loop. The value is the lower-case name, which is also the
    name of the `Callback` method that handles it, so ``Event("batch_end")`` works."""

    INIT = "init"
    BEFORE_LOAD = "before_load"
    AFTER_LOAD = "after_load"
    FIT_START = "fit_start"
    EPOCH_START = "epoch_start"
    BEFORE_DATALOADER = "before_dataloader"
    AFTER_DATALOADER = "after_dataloader"
    BATCH_START = "batch_start"
    BEFORE_TRAIN_BATCH = "before_train_batch"
    BEFORE_FORWARD = "before_forward"
    AFTER_FORWARD = "after_forward"
    BEFORE_LOSS = "before_loss"
    AFTER_LOSS = "after_loss"
    BEFORE_BACKWARD = "before_backward"
    AFTER_BACKWARD = "after_backward"
    AFTER_TRAIN_BATCH = "after_train_batch"
    BATCH_END = "batch_end"
    BATCH_CHECKPOINT = "batch_checkpoint"
    EPOCH_END = "epoch_end"
    EPOCH_CHECKPOINT = "epoch_checkpoint"
    FIT_END = "fit_end"
    EVAL_START = "eval_start"
    EVAL_BATCH_START = "eval_batch_start"
    EVAL_BEFORE_FORWARD = "eval_before_forward"
    EVAL_AFTER_FORWARD = "eval_after_forward"
    EVAL_BATCH_END = "eval_batch_end"
    EVAL_END = "eval_end"

    def __str__(self) -> str:
        return self.value

    @property
    def is_after_event(self) -> bool:
        """True for the ``AFTER_*`` events, on which matched methods run in reverse order."""
        return self.name.startswith("AFTER_")
