"""Events: the named points of the training loop where methods and callbacks run.

The whole loop, with every event where it fires (``Trainer.fit``)::

    INIT                                  # once, in Trainer.__init__: model surgery goes here
    BEFORE_LOAD; <load checkpoint>; AFTER_LOAD
    FIT_START
    while not done:
        ITERATION_START                   # when an iteration begins (once per run unless state.iteration_length)
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
        ITERATION_END; ITERATION_CHECKPOINT   # after every state.iteration_length epochs (never when None)
    <evaluation, if not done at this batch>
    FIT_END                               # methods; <checkpoint, if not written at this batch>; callbacks

    EVAL_BEFORE_ALL                       # EVAL_STANDALONE_START when Trainer.eval() is called
    EVAL_START
    for batch in eval_dataloader:         # at most eval_subset_num_batches
        EVAL_BATCH_START; EVAL_BEFORE_FORWARD; <outputs = model.eval_forward(batch)>
        EVAL_AFTER_FORWARD; <metrics updated>; EVAL_BATCH_END
    EVAL_END
    EVAL_AFTER_ALL                        # EVAL_STANDALONE_END after Trainer.eval()

    PREDICT_START                         # Trainer.predict(dataloader)
    for batch in dataloader:
        PREDICT_BATCH_START; PREDICT_BEFORE_FORWARD; <outputs = model(batch)>
        PREDICT_AFTER_FORWARD; PREDICT_BATCH_END
    PREDICT_END

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
    name of the `Callback` method that handles it, so ``Event("batch_end")`` works; as in Composer,
    the lookup ignores case (``Event("INIT")``, ``Event("Batch_End")``)."""

    INIT = "init"
    BEFORE_LOAD = "before_load"
    AFTER_LOAD = "after_load"
    FIT_START = "fit_start"
    ITERATION_START = "iteration_start"
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
    ITERATION_END = "iteration_end"
    ITERATION_CHECKPOINT = "iteration_checkpoint"
    FIT_END = "fit_end"
    EVAL_BEFORE_ALL = "eval_before_all"
    EVAL_START = "eval_start"
    EVAL_BATCH_START = "eval_batch_start"
    EVAL_BEFORE_FORWARD = "eval_before_forward"
    EVAL_AFTER_FORWARD = "eval_after_forward"
    EVAL_BATCH_END = "eval_batch_end"
    EVAL_END = "eval_end"
    EVAL_AFTER_ALL = "eval_after_all"
    EVAL_STANDALONE_START = "eval_standalone_start"
    EVAL_STANDALONE_END = "eval_standalone_end"
    PREDICT_START = "predict_start"
    PREDICT_BATCH_START = "predict_batch_start"
    PREDICT_BEFORE_FORWARD = "predict_before_forward"
    PREDICT_AFTER_FORWARD = "predict_after_forward"
    PREDICT_BATCH_END = "predict_batch_end"
    PREDICT_END = "predict_end"

    @classmethod
    def _missing_(cls, value: object) -> Event | None:
        if isinstance(value, str):
            return cls._value2member_map_.get(value.strip().lower())  # type: ignore[return-value]
        return None

    def __str__(self) -> str:
        return self.value

    @property
    def runs_methods_in_reverse(self) -> bool:
        """True for the ``AFTER_*`` events, on which matched methods run in reverse order (Composer's FILO pass)."""
        return self.name.startswith("AFTER_")

    @property
    def is_before_event(self) -> bool:
        """True for the events that open a pair (``*_START``, ``BEFORE_*``), as Composer lists them."""
        return self in _BEFORE_EVENTS

    @property
    def is_after_event(self) -> bool:
        """True for the events that close a pair (``*_END``, ``AFTER_*``), as Composer lists them."""
        return self in _AFTER_EVENTS

    @property
    def canonical_name(self) -> str:
        """The name without before/after/start/end (Composer's): ``before_forward`` and ``after_forward`` are
        ``forward``, ``eval_before_forward`` is ``eval_forward``."""
        name = self.value
        for part in ("before_", "after_", "_start", "_end"):
            name = name.replace(part, "")
        return name

    @property
    def is_eval(self) -> bool:
        """True for the evaluation loop's events."""
        return self.value.startswith("eval_")

    @property
    def is_predict(self) -> bool:
        """True for the prediction loop's events (`Trainer.predict`)."""
        return self.value.startswith("predict_")


# Composer's lists: the events that open a pair and those that close one (INIT, the loading
# events' neighbours and the *_CHECKPOINT events are neither).
_BEFORE_EVENTS = frozenset(e for e in Event if "BEFORE_" in e.name or e.name.endswith("_START"))
_AFTER_EVENTS = frozenset(e for e in Event if "AFTER_" in e.name or e.name.endswith("_END"))
