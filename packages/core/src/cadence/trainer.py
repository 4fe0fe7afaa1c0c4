"""`Trainer`: the training loop. Read it top to bottom; every event fires where it happens.

Setup (``__init__``): validate everything, join the process group (torchrun), seed, build
the `State` and `Engine`, fire INIT (surgery), load a checkpoint between BEFORE_LOAD and
AFTER_LOAD, then wrap the model in DDP. ``fit()`` runs epochs of batches of microbatches;
``eval()`` and ``predict()`` run `cadence._evaluation`'s loops.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.optim.lr_scheduler import LRScheduler

from cadence import _snapshot as snapshot
from cadence import checkpoint as ckpt
from cadence import distributed as dist
from cadence._arguments import (
    DURATION_UNITS,
    as_list,
    check_checkpointing,
    check_duration_is_countable,
    check_flags,
    check_max_duration,
    check_microbatch_argument,
    check_model,
    check_seed_and_run_name,
    parse_device,
    refuse_unknown_arguments,
)
from cadence._compilation import CompiledStep, check_compile_config, distributed_module
from cadence._evaluation import run_eval, run_predict
from cadence._microbatch_search import MicrobatchSearch
from cadence._run_schedules import RunSchedules
from cadence._sharding import check_even_batches, parse_parallelism_config, shard_model
from cadence._snapshot import seed_all
from cadence.algorithm import Algorithm, as_algorithm
from cadence.batch import batch_num_samples, batch_num_tokens, batch_to_device, split_batch
from cadence.callback import Callback
from cadence.engine import Engine
from cadence.event import Event
from cadence.intervals import IntervalLike, parse_interval
from cadence.loggers.console import ConsoleLogger
from cadence.loggers.destination import LoggerDestination
from cadence.loggers.logger import Logger, run_hyperparameters
from cadence.models.base import total_loss
from cadence.nonfinite import NONFINITE_MODES, NonFiniteLossError, NonFiniteLossGuard
from cadence.ops.checks import check_bool, check_choice
from cadence.ops.schedule_scaling import scale_duration
from cadence.ops.weight_decay import DecoupledSGDW
from cadence.precision import Precision, autocast_context, make_grad_scaler
from cadence.run_data import RunData, check_subset_num_batches, limited
from cadence.schedulers import Scheduler
from cadence.state import State
from cadence.termination import RunEnd
from cadence.time import Time, TimeLike, Timestamp, parse_time

__all__ = ["Trainer", "seed_all"]

_NO_SYNC = contextlib.nullcontext()  # reusable, as precision's: no context allocated per microbatch


class Trainer:
    """Trains a `Model` with a list of speed-up methods.

    Args:
        model: a `cadence.Model` (``forward(batch)``, ``loss(outputs, batch)``).
        train_dataloader: yields batches; standard DataLoaders are rebuilt for exact resume and sharding.
        max_duration: ``"10ep"``, ``"500ba"``, ``"3e4sp"``, ``Time`` or an int (epochs).
        optimizers: torch optimizers built on ``model.parameters()`` (default, as Composer's:
            ``DecoupledSGDW(model.parameters(), lr=0.1)``).
        schedulers: cadence schedulers (stepped every batch) or torch ``LRScheduler``s (every epoch).
        train_subset_num_batches, eval_subset_num_batches: cut every epoch / evaluation to this many batches
            (-1: all).
        algorithms, callbacks, loggers: methods, observers, log destinations (each: one object or a list).
        eval_dataloader, eval_interval: what to evaluate and when (``"1ep"``, ``"100ba"``, 0 = never).
        device: ``"cpu"`` or ``"gpu"`` (default: GPU when CUDA is available).
        precision: ``"fp32"``, ``"amp_bf16"`` or ``"amp_fp16"`` (default bf16 on GPUs that have it).
        device_train_microbatch_size: split each batch into microbatches of this size (gradient accumulation);
            ``"auto"`` (one GPU) finds the largest that fits (`cadence._microbatch_search`).
        save_folder, save_interval, save_num_checkpoints_to_keep: checkpointing (-1 keeps all).
        save_filename: the checkpoints' names, with ``{epoch}`` and ``{batch}`` (`cadence.checkpoint.CheckpointNames`).
        save_overwrite: allow writing over checkpoints of other run positions in ``save_folder``.
        load_path: a checkpoint to start from. autoresume: continue from the newest checkpoint of
            ``save_folder`` that loads (damaged ones are skipped with a warning, never deleted).
        load_weights_only, load_strict_model_weights: take only the model's weights from `load_path`
            (the run starts at zero), and allow missing or unexpected keys (named in a warning).
        seed, deterministic_mode: the root seed (random when None; rank r uses ``seed + r``); deterministic kernels.
        scale_schedule_ratio: stretch (>1) or shrink (<1) the run and every schedule.
        run_name, progress_bar, compute_train_metrics: presentation.
        nonfinite_loss: ``"error"`` stops the run at a NaN/inf loss, naming the step; ``"skip"`` skips
            such steps (see `cadence.nonfinite` for what each costs on an accelerator).
        compile_config: ``torch.compile`` arguments (``{}``: its defaults) for the forward and the loss; None
            (default) runs eagerly. ``trainer.compiled.report()`` counts what compiled (`cadence._compilation`).
        parallelism_config: ``{"fsdp": {...}}`` shards the model with torch's FSDP2 (`cadence._sharding`).

    Composer arguments that cadence does not take raise a `TypeError` that says what to use instead.

    The trainer owns the end of the run: its loggers are finished exactly once, FAILED (or KILLED
    on Ctrl-C and SIGTERM) when an exception escapes ``__init__`` or ``fit``, FINISHED by `close`.
    """

    def __init__(
        self,
        *,
        model: nn.Module,
        train_dataloader: Iterable[Any] | None = None,
        max_duration: TimeLike | None = None,
        optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None = None,
        schedulers: Any = None,
        algorithms: Algorithm | Sequence[Algorithm] | None = None,
        callbacks: Callback | Sequence[Callback] | None = None,
        loggers: LoggerDestination | Sequence[LoggerDestination] | None = None,
        eval_dataloader: Iterable[Any] | None = None,
        eval_interval: IntervalLike = 1,
        device: str | torch.device | None = None,
        precision: str | Precision | None = None,
        device_train_microbatch_size: int | str | None = None,
        train_subset_num_batches: int = -1,
        eval_subset_num_batches: int = -1,
        save_folder: str | Path | None = None,
        save_filename: str = "ep{epoch}-ba{batch}.pt",
        save_interval: IntervalLike = "1ep",
        save_num_checkpoints_to_keep: int = -1,
        save_overwrite: bool = False,
        load_path: str | Path | None = None,
        load_weights_only: bool = False,
        load_strict_model_weights: bool = True,
        autoresume: bool = False,
        seed: int | None = None,
        deterministic_mode: bool = False,
        scale_schedule_ratio: float = 1.0,
        run_name: str | None = None,
        progress_bar: bool = True,
        compute_train_metrics: bool = False,
        nonfinite_loss: str = "error",
        compile_config: dict[str, Any] | None = None,
        parallelism_config: dict[str, Any] | None = None,
        **unsupported: Any,
    ):
        # Validate everything before any work is done ------------------------------------
        refuse_unknown_arguments(unsupported, inspect.signature(Trainer).parameters)
        check_model(model)
        device_ = parse_device(device)
        precision_ = Precision.parse(precision, device_)
        compile_ = check_compile_config(compile_config)
        fsdp = parse_parallelism_config(parallelism_config, precision_, device_)
        max_duration_, ssr = check_max_duration(max_duration, scale_schedule_ratio)
        for name, subset in (("train", train_subset_num_batches), ("eval", eval_subset_num_batches)):
            check_subset_num_batches(f"{name}_subset_num_batches", subset)
        self._names = ckpt.CheckpointNames(save_filename)
        optimizers_ = as_list(optimizers, "optimizers", torch.optim.Optimizer)
        schedulers_ = as_list(schedulers, "schedulers", (Scheduler, LRScheduler))
        algorithms_ = as_list(algorithms, "algorithms", object)  # the Engine checks they are Algorithms
        callbacks_ = as_list(callbacks, "callbacks", Callback)
        loggers_ = as_list(loggers, "loggers", LoggerDestination)
        self._eval_interval = parse_interval(eval_interval, "eval_interval")
        self._save_interval = parse_interval(save_interval, "save_interval")
        check_flags(autoresume=autoresume, save_overwrite=save_overwrite, deterministic_mode=deterministic_mode,
                    progress_bar=progress_bar, compute_train_metrics=compute_train_metrics,
                    load_weights_only=load_weights_only,
                    load_strict_model_weights=load_strict_model_weights)  # fmt: skip
        check_checkpointing(save_folder, save_num_checkpoints_to_keep, autoresume, load_path)
        check_seed_and_run_name(seed, run_name)
        self._nonfinite = NonFiniteLossGuard(check_choice("nonfinite_loss", nonfinite_loss, NONFINITE_MODES))
        self.save_folder = Path(save_folder) if save_folder is not None else None
        self.save_num_checkpoints_to_keep = save_num_checkpoints_to_keep
        self.save_overwrite, self.compute_train_metrics = save_overwrite, compute_train_metrics

        # Environment: process group, seeds, determinism ---------------------------------
        rank, world_size = dist.initialize_from_environment(device_)
        microbatch_size = check_microbatch_argument(device_train_microbatch_size, train_dataloader, device_, world_size)
        if seed is None:
            seed = dist.broadcast_object(int(time.time_ns() % 2**31))
        seed_all(seed + rank)
        if deterministic_mode:
            torch.use_deterministic_algorithms(True)
            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False
        run_name = run_name or dist.broadcast_object(time.strftime("run-%Y%m%d-%H%M%S"))

        # State, loaders, engine ------------------------------------------------------------
        model.to(device_)
        if optimizers is None and any(p.requires_grad for p in model.parameters()):
            optimizers_ = [DecoupledSGDW(model.parameters(), lr=0.1)]  # Composer's default
        self._data = RunData(seed, rank, world_size)
        self._data.set_train(train_dataloader, train_subset_num_batches)
        self._data.set_eval(eval_dataloader, eval_subset_num_batches)
        if rank != 0:  # only rank 0 logs
            loggers_ = []
        elif progress_bar and not any(isinstance(d, ConsoleLogger) for d in loggers_):
            loggers_.append(ConsoleLogger())
        self.state = State(
            model=model,
            max_duration=max_duration_,
            rank_zero_seed=seed,
            dataloader=self._data.train.loader if self._data.train else None,
            dataloader_len=self._data.epoch_length(),
            optimizers=optimizers_,
            algorithms=algorithms_,
            callbacks=[*callbacks_, *loggers_],
            device=device_,
            precision=precision_,
            device_train_microbatch_size=microbatch_size,
            rank=rank,
            world_size=world_size,
            run_name=run_name,
        )
        if max_duration_ is not None:  # the whole schedule follows (compiled below, after INIT)
            self.state.max_duration = scale_duration(max_duration_, ssr, self.state.dataloader_len)
        self.state.scale_schedule_ratio = ssr
        self.state.scaler = make_grad_scaler(precision_, device_)
        self.logger = Logger(self.state, loggers_)
        auto_microbatches = device_train_microbatch_size == "auto"
        self._microbatch_search = MicrobatchSearch(self.state, self.logger) if auto_microbatches else None
        self._end = RunEnd(self.logger)  # the loggers are finished exactly once
        with self._end.guard():  # from here on the run exists: a failure is recorded
            self.engine = Engine(self.state, logger=self.logger)  # rejects conflicting methods

            # INIT (surgery), then metrics and schedulers on the final model ------------------
            self.engine.run_event(Event.INIT)
            model = shard_model(self.state, fsdp, self._data)  # FSDP: after surgery, before loading
            self.state.defer_metrics()  # built from the final model on first use
            self._schedules = RunSchedules(self.state, schedulers_)

            # Load a checkpoint between BEFORE_LOAD and AFTER_LOAD; restore RNG last -----------
            self.engine.run_event(Event.BEFORE_LOAD)
            start = ckpt.checkpoint_to_start_from(self.save_folder, load_path, autoresume, save_overwrite, self._names)
            from_load_path = start is not None and load_path is not None and start[0] == Path(load_path)
            weights_only = load_weights_only and from_load_path
            if weights_only and start is not None:
                snapshot.restore_weights(self.state, start[1], start[0], strict=load_strict_model_weights)
            elif start is not None:
                self._load(*start, strict=load_strict_model_weights)
            self.engine.run_event(Event.AFTER_LOAD)

            # The module the step calls: DDP after surgery and loading, then torch.compile --------
            distributed = distributed_module(model, self.state.algorithms, device_, 1 if fsdp else world_size)
            self.compiled = None if compile_ is None else CompiledStep(distributed, self.state.model.loss, compile_)
            self._forward_module: Callable[..., Any] = self.compiled.forward if self.compiled else distributed
        self._create_graph = any(as_algorithm(a).backwards_create_graph for a in self.state.algorithms)
        self._first_batch_checked = False
        self._last_eval_batch = -1
        self._last_save = self._position() if start is not None and not weights_only else None

    def _position(self) -> tuple[int, int]:
        return self.state.timestamp.epoch, self.state.timestamp.batch

    # Setup helpers ------------------------------------------------------------------------
    def _load(self, path: Path, payload: dict[str, Any], strict: bool = True) -> None:
        restored = snapshot.restore_run(self.state, payload, self.state.schedulers, path, strict_weights=strict)
        self._nonfinite.load_state_dict(restored["trainer"].get("nonfinite", {}))
        self._data.reseed(self.state.rank_zero_seed)
        if restored["rng"] is not None:
            snapshot.restore_rng(restored["rng"])
        else:
            warnings.warn(f"the checkpoint has no RNG state for rank {self.state.rank}; reseeding", stacklevel=3)
            seed_all(self.state.seed)

    # Training -----------------------------------------------------------------------------
    def fit(
        self,
        *,
        train_dataloader: Iterable[Any] | None = None,
        duration: TimeLike | None = None,
        reset_time: bool = False,
        optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer] | None = None,
        schedulers: Any = None,
        train_subset_num_batches: int | None = None,
        eval_dataloader: Iterable[Any] | None = None,
        eval_interval: IntervalLike | None = None,
        eval_subset_num_batches: int | None = None,
        **unsupported: Any,
    ) -> None:
        """Train until `max_duration`. If anything escapes, loggers record the run FAILED (KILLED on SIGINT/SIGTERM).

        As in Composer, each argument replaces the constructor's for this and later calls: `duration` trains that
        much more (from zero after `reset_time`, which restarts the schedules); new `optimizers` take them along.
        """
        refuse_unknown_arguments(unsupported, inspect.signature(Trainer.fit).parameters, "fit")
        with self._end.guard():
            check_bool("reset_time", reset_time)
            if train_dataloader is not None or train_subset_num_batches is not None:
                self._set_train_data(train_dataloader, train_subset_num_batches)
            self._data.set_eval(eval_dataloader, eval_subset_num_batches)
            if reset_time:
                self.state.timestamp = Timestamp()
                self._last_eval_batch, self._last_save = -1, None
            if duration is not None:
                duration = parse_time("duration", duration, units=DURATION_UNITS, positive=True)
                self.state.max_duration = duration + Time(self.state.timestamp.get(duration.unit), duration.unit)
            if optimizers is not None or schedulers is not None:
                self._schedules.replace(optimizers, schedulers)
            if eval_interval is not None:
                self._eval_interval = parse_interval(eval_interval, "eval_interval")
            if self._data.train is None or self.state.max_duration is None:
                raise ValueError("fit() needs train_dataloader and max_duration (or duration); pass them")
            if not self.state.optimizers:
                raise ValueError("fit() needs optimizers; e.g. optimizers=torch.optim.SGD(model.parameters(), lr=0.1)")
            self._fit()

    def _set_train_data(self, loader: Iterable[Any] | None, subset: int | None) -> None:
        self._data.set_train(loader, subset)
        if self._data.train is None:
            raise ValueError("fit(train_subset_num_batches=...) needs a train_dataloader; pass one")
        if loader is not None:
            self._first_batch_checked = False  # the methods look at the new batches before they train
        self.state.set_dataloader(self._data.train.loader, "train", self._data.epoch_length())
        self.state.train_dataloader = self._data.train.loader

    def _fit(self) -> None:
        state = self.state
        # fixed from here (methods may wrap them up to AFTER_LOAD); Any: torch types a closure as () -> float
        self._closure_optimizer: Any = next((o for o in state.optimizers if getattr(o, "uses_closure", False)), None)
        state.model.train()
        self.logger.log_hyperparameters(run_hyperparameters(state))
        evaluation_due = self._data.eval is not None and self._eval_interval is not None
        state.build_metrics(train=self.compute_train_metrics, evaluation=evaluation_due)  # before FIT_START's clocks
        self.engine.run_event(Event.FIT_START)
        while not state.is_done():
            if state.timestamp.batch_in_epoch == 0 and state.timestamp.epoch_in_iteration == 0:
                self.engine.run_event(Event.ITERATION_START)
            if state.timestamp.batch_in_epoch == 0:
                self.engine.run_event(Event.EPOCH_START)
            if self._train_epoch():
                self._end_epoch()
        self._nonfinite.check()
        if evaluation_due and self._last_eval_batch != state.timestamp.batch:
            self._evaluate()
        if self.compiled is not None:
            self.logger.log_metrics(self.compiled.report())
        self._run_event_saving(Event.FIT_END, self.save_folder is not None and self._last_save != self._position())
        self.logger.flush()

    def _train_epoch(self) -> bool:
        """Train until the epoch ends (True) or the run is done mid-epoch (False)."""
        state = self.state
        assert self._data.train is not None
        batches = self._data.train.epoch(state.timestamp.epoch, skip_batches=state.timestamp.batch_in_epoch)
        while not ((length := state.dataloader_len) and state.timestamp.batch_in_epoch >= length):
            self.engine.run_planned(Event.BEFORE_DATALOADER)
            try:
                batch = next(batches)
            except StopIteration:
                if state.timestamp.batch_in_epoch == 0:
                    raise ValueError("train_dataloader yielded no batches") from None
                return True
            state.batch = batch_to_device(batch, state.device)
            if not self._first_batch_checked:
                self._check_first_batch(state.batch)
            self.engine.run_planned(Event.AFTER_DATALOADER)
            self._train_batch()
            if state.is_done():
                return bool(n := state.dataloader_len) and n is not None and state.timestamp.batch_in_epoch >= n
        return True

    def _check_first_batch(self, batch: Any) -> None:
        """Before anything trains: every method can work on these batches, and a ``tok`` duration can end."""
        self._first_batch_checked = True
        self.engine.check_applicable(batch)
        check_duration_is_countable(self.state.max_duration, batch)

    def _train_batch(self) -> None:
        state = self.state
        started = time.perf_counter()
        self.engine.run_planned(Event.BATCH_START)
        num_samples, num_tokens = batch_num_samples(state.batch), batch_num_tokens(state.batch)
        for optimizer in state.optimizers:
            optimizer.zero_grad(set_to_none=True)
        self.engine.run_planned(Event.BEFORE_TRAIN_BATCH)
        step = state.timestamp.batch + 1
        if self._closure_optimizer is not None:  # e.g. SAM re-evaluates the loss: the batch runs in the closure
            batch, passes = state.batch, itertools.count()  # train metrics see the first pass only
            loss = self._closure_optimizer.step(
                closure=lambda sync=True: self._forward_backward(batch, sync, metrics=next(passes) == 0)
            )
            if not self._nonfinite.observe(loss, step):  # the update is done: it cannot be skipped any more
                raise NonFiniteLossError(step, float(loss), " (a closure optimizer updated the weights already)")
        else:
            loss = self._forward_backward(state.batch)
            if self._nonfinite.observe(loss, step):
                for optimizer in state.optimizers:
                    if state.scaler is not None:
                        state.scaler.step(optimizer)
                    else:
                        optimizer.step()
                if state.scaler is not None:
                    state.scaler.update()
            elif self.logger.destinations:
                self.logger.log_metrics({"trainer/nonfinite_skips": self._nonfinite.skipped}, step=step)
        state.timestamp = state.timestamp.to_next_batch(num_samples, num_tokens, time.perf_counter() - started)
        self._schedules.step(every_batch=True)
        if self.logger.destinations:
            self.logger.log_metrics({"loss/train/total": loss, **self._schedules.learning_rates()})
        self.engine.run_planned(Event.BATCH_END)
        self._evaluate_and_save_if_due(Event.BATCH_END, Event.BATCH_CHECKPOINT)

    def _forward_backward(self, batch: Any, sync: bool = True, metrics: bool = True) -> torch.Tensor:
        """Forward, loss and backward over the microbatches of `batch`; returns the batch's mean loss.

        Under DDP the gradients are all-reduced on the last microbatch, unless `sync` is False (a
        closure optimizer's first pass may use local gradients, as SAM's perturbation does).
        """
        if self._microbatch_search is not None:  # "auto": halve the microbatches until the batch fits
            step = lambda: self._accumulate(batch, sync, metrics)  # noqa: E731
            return self._microbatch_search.run(step, batch_num_samples(batch))
        return self._accumulate(batch, sync, metrics)

    def _accumulate(self, batch: Any, sync: bool, metrics: bool) -> torch.Tensor:
        state = self.state
        size = state.device_train_microbatch_size
        microbatches = split_batch(batch, size) if size else [batch]
        batch_size = batch_num_samples(batch) if len(microbatches) > 1 else 0
        total: torch.Tensor | None = None
        for index, microbatch in enumerate(microbatches):
            no_sync = getattr(self._forward_module, "no_sync", None) if state.world_size > 1 else None
            weight = batch_num_samples(microbatch) / batch_size if batch_size else 1.0
            with no_sync() if no_sync is not None and not (sync and index == len(microbatches) - 1) else _NO_SYNC:
                loss = self._train_microbatch(microbatch, weight, metrics and self.compute_train_metrics)
            total = loss if total is None else total + loss
        state.batch = batch
        if state.scaler is not None:
            for optimizer in state.optimizers:
                state.scaler.unscale_(optimizer)
        self.engine.run_planned(Event.AFTER_TRAIN_BATCH)
        assert total is not None
        return total

    def _train_microbatch(self, microbatch: Any, weight: float, update_metrics: bool) -> torch.Tensor:
        """One microbatch; its loss is scaled by its share of the batch so gradients add up to the batch mean."""
        state, engine = self.state, self.engine
        state.batch = microbatch
        engine.run_planned(Event.BEFORE_FORWARD)
        with autocast_context(state.precision, state.device):
            state.outputs = self._forward_module(state.batch)
        engine.run_planned(Event.AFTER_FORWARD)
        engine.run_planned(Event.BEFORE_LOSS)
        with autocast_context(state.precision, state.device):
            state.loss = (self.compiled.loss if self.compiled else state.model.loss)(state.outputs, state.batch)
        engine.run_planned(Event.AFTER_LOSS)
        engine.run_planned(Event.BEFORE_BACKWARD)
        loss = total_loss(state.loss)
        if weight != 1.0:
            loss = loss * weight
        (state.scaler.scale(loss) if state.scaler is not None else loss).backward(create_graph=self._create_graph)
        engine.run_planned(Event.AFTER_BACKWARD)
        if update_metrics:
            for metric in state.train_metrics.values():
                state.model.update_metric(state.batch, state.outputs, metric)
        return loss.detach()

    def _end_epoch(self) -> None:
        state = self.state
        if self.compute_train_metrics and state.train_metrics:
            computed = {f"metrics/train/{k}": m.compute() for k, m in state.train_metrics.items()}
            self.logger.log_metrics(computed)
            for metric in state.train_metrics.values():
                metric.reset()
        state.timestamp = state.timestamp.to_next_epoch()
        self._schedules.step(every_batch=False)
        self.engine.run_event(Event.EPOCH_END)
        self._evaluate_and_save_if_due(Event.EPOCH_END, Event.EPOCH_CHECKPOINT)
        if state.iteration_length and state.timestamp.epoch_in_iteration >= state.iteration_length:
            self.engine.run_event(Event.ITERATION_END)
            state.timestamp = state.timestamp.to_next_iteration()
            self.engine.run_event(Event.ITERATION_CHECKPOINT)

    def _evaluate_and_save_if_due(self, event: Event, checkpoint_event: Event) -> None:
        state, folder, saving = self.state, self.save_folder, self._save_interval
        if self._data.eval is not None and self._eval_interval is not None and self._eval_interval(state, event):
            self._evaluate()
        self._run_event_saving(checkpoint_event, folder is not None and saving is not None and saving(state, event))

    def _run_event_saving(self, event: Event, save: bool) -> None:
        """`event`, with the checkpoint (when `save`) written after its methods and before its callbacks:
        methods prepare what is saved (``state.checkpoint_due`` tells them), callbacks see it written."""
        if not save:  # the usual case, after every batch: the event in one dispatch
            self.engine.run_planned(event)
            return
        self.state.checkpoint_due = True
        try:
            self.engine.run_algorithms(event)
        finally:
            self.state.checkpoint_due = False
        self._save()
        self.engine.run_callbacks(event)

    # Evaluation and prediction ----------------------------------------------------------
    def eval(self, eval_dataloader: Iterable[Any] | None = None, subset_num_batches: int = -1) -> dict[str, float]:
        """Evaluate now (on `eval_dataloader`, or the trainer's); returns ``{metric name: value}``.

        Fires EVAL_STANDALONE_START and EVAL_STANDALONE_END around the loop, as Composer's does.
        """
        subset = check_subset_num_batches("subset_num_batches", subset_num_batches)
        self._data.set_eval(eval_dataloader)
        if self._data.eval is None:
            raise ValueError("eval() needs an eval_dataloader; pass it here or to Trainer(...)")
        return self._evaluate(standalone=True, subset_num_batches=subset)

    def _evaluate(self, standalone: bool = False, subset_num_batches: int | None = None) -> dict[str, float]:
        self._nonfinite.check()  # never evaluate (or log) weights trained on a NaN loss
        first, last = (
            (Event.EVAL_STANDALONE_START, Event.EVAL_STANDALONE_END)
            if standalone
            else (Event.EVAL_BEFORE_ALL, Event.EVAL_AFTER_ALL)
        )
        check_even_batches(self.state.model, self._data.eval, subset_num_batches, self._data.eval_subset)
        self.engine.run_event(first)
        results = run_eval(self.engine, self._data.eval_batches(subset_num_batches))
        self.engine.run_event(last)
        self._last_eval_batch = self.state.timestamp.batch
        return results

    def predict(self, dataloader: Iterable[Any], subset_num_batches: int = -1, *, return_outputs: bool = True) -> list:
        """The model's outputs (``model(batch)``, on the CPU) for every batch of `dataloader`, in eval mode and
        without gradients, between PREDICT_START and PREDICT_END (Composer's ``Trainer.predict``)."""
        subset = check_subset_num_batches("subset_num_batches", subset_num_batches)
        check_bool("return_outputs", return_outputs)
        check_even_batches(self.state.model, plan := self._data.plan(dataloader), subset)  # FSDP: no rank waits
        return run_predict(self.engine, limited(plan.epoch(0), subset), return_outputs)

    # Checkpoints --------------------------------------------------------------------------
    def save_checkpoint(self) -> Path | None:
        """Write a checkpoint of the current state now (rank 0 writes; every rank must call)."""
        if self.save_folder is None:
            raise ValueError("save_checkpoint() needs save_folder; pass it to Trainer(...)")
        return self._save()

    def _save(self) -> Path | None:
        self._nonfinite.check()  # never checkpoint weights trained on a NaN loss
        self._last_save = self._position()
        assert self.save_folder is not None
        trainer = {"nonfinite": self._nonfinite.state_dict()}
        return snapshot.save_run(self.state, self.save_folder, self._names, trainer, self.save_num_checkpoints_to_keep)

    def close(self) -> None:
        """End the run: the loggers record it FINISHED (unless it failed already), then callbacks release
        what they hold (progress bars). Idempotent."""
        self.logger.flush()
        self._end.finish("FINISHED")
        self.engine.close()
