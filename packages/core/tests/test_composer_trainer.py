"""Composer's documented Trainer behaviour beyond the constructor's list arguments, for code that switches
by changing imports: the default optimizer, the iteration / eval / standalone-eval / predict events,
``Trainer.predict``, the engine's traces, ``Algorithm.state_dict``'s default, the subset, save and load
arguments, ``fit``'s overrides, and a clear ``TypeError`` for Composer arguments cadence does not take.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from cadence import Algorithm, Callback, Event, Trainer
from cadence import checkpoint as ckpt
from cadence._microbatch_search import MicrobatchSearch
from cadence.optim import CosineAnnealingScheduler, DecoupledAdamW, DecoupledSGDW
from cadence.state import State
from cadence.testing import mlp_classifier


def _loader(samples: int = 24, batch_size: int = 4, seed: int = 0) -> DataLoader:
    generator = torch.Generator().manual_seed(seed)
    data = TensorDataset(torch.randn(samples, 4, generator=generator), torch.randint(0, 2, (samples,)))
    return DataLoader(data, batch_size=batch_size)


class Journal(Callback):
    """Every event it sees, in order."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def run_event(self, event, state, logger) -> None:
        self.events.append(event.value)


def _trainer(**kwargs) -> Trainer:
    torch.manual_seed(0)
    model = kwargs.pop("model", None) or mlp_classifier(4, 2)
    args = {"model": model, "train_dataloader": _loader(), "max_duration": "2ep", "device": "cpu"}
    return Trainer(**{**args, "progress_bar": False, "seed": 0, **kwargs})


# The default optimizer --------------------------------------------------------------------------
def test_without_optimizers_the_trainer_builds_decoupled_sgdw_with_lr_0_1_and_trains() -> None:
    trainer = _trainer()
    (optimizer,) = trainer.state.optimizers
    assert type(optimizer) is DecoupledSGDW and optimizer.param_groups[0]["lr"] == 0.1
    assert {id(p) for p in optimizer.param_groups[0]["params"]} == {id(p) for p in trainer.state.model.parameters()}
    before = [p.detach().clone() for p in trainer.state.model.parameters()]
    trainer.fit()
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.state.model.parameters()))


def test_the_decoupled_optimizers_are_importable_where_composer_keeps_them() -> None:
    import cadence_decoupled_weight_decay as package

    assert package.DecoupledSGDW is DecoupledSGDW and package.DecoupledAdamW is DecoupledAdamW


# Events -------------------------------------------------------------------------------------------
def test_event_has_composers_forty_members_and_properties() -> None:
    assert len(Event) == 40 and Event("iteration_start") is Event.ITERATION_START
    assert all(event.value == event.name.lower() for event in Event)
    assert Event.BEFORE_FORWARD.is_before_event and Event.EVAL_BEFORE_ALL.is_before_event
    assert Event.BATCH_END.is_after_event and Event.EVAL_STANDALONE_END.is_after_event
    assert not Event.INIT.is_before_event and not Event.BATCH_CHECKPOINT.is_after_event
    assert Event.AFTER_FORWARD.canonical_name == "forward" == Event.BEFORE_FORWARD.canonical_name
    assert Event.EVAL_BEFORE_FORWARD.canonical_name == "eval_forward"
    assert Event.EVAL_END.is_eval and not Event.EVAL_END.is_predict and Event.PREDICT_BATCH_END.is_predict
    # the engine reverses only AFTER_* events (Composer's FILO pass), not *_END or EVAL_AFTER_*
    assert Event.AFTER_LOSS.runs_methods_in_reverse and not Event.EVAL_AFTER_FORWARD.runs_methods_in_reverse


def test_fit_fires_iteration_start_once_and_evaluation_between_eval_before_all_and_eval_after_all() -> None:
    journal = Journal()
    trainer = _trainer(callbacks=journal, eval_dataloader=_loader(8), eval_interval="1ep")
    trainer.fit()
    events = journal.events
    assert events.count("iteration_start") == 1 and events.count("iteration_end") == 0
    assert events.index("iteration_start") == events.index("fit_start") + 1 < events.index("epoch_start")
    assert events.count("eval_before_all") == events.count("eval_after_all") == 2  # once per epoch
    for start in [i for i, name in enumerate(events) if name == "eval_before_all"]:
        assert events[start + 1] == "eval_start" and events[events.index("eval_end", start) + 1] == "eval_after_all"
    assert "eval_standalone_start" not in events


def test_iteration_length_closes_an_iteration_every_n_epochs() -> None:
    journal = Journal()
    trainer = _trainer(callbacks=journal, max_duration="4ep")
    trainer.state.iteration_length = 2
    trainer.fit()
    assert journal.events.count("iteration_start") == 2 and journal.events.count("iteration_end") == 2
    assert journal.events.count("iteration_checkpoint") == 2
    end = journal.events.index("iteration_end")
    assert journal.events[end - 1] == "epoch_checkpoint" and journal.events[end + 1] == "iteration_checkpoint"
    assert trainer.state.timestamp.iteration == 2 and trainer.state.timestamp.epoch_in_iteration == 0


def test_standalone_eval_fires_eval_standalone_start_and_end_and_honours_subset_num_batches() -> None:
    journal = Journal()
    trainer = _trainer(callbacks=journal)
    trainer.eval(_loader(16), subset_num_batches=2)
    events = journal.events[journal.events.index("eval_standalone_start") :]
    one_batch = ["eval_batch_start", "eval_before_forward", "eval_after_forward", "eval_batch_end"]
    assert events == ["eval_standalone_start", "eval_start", *one_batch * 2, "eval_end", "eval_standalone_end"]
    assert "eval_before_all" not in journal.events
    with pytest.raises(ValueError, match=r"subset_num_batches=0 must be -1 \(every batch\) or an int >= 1"):
        trainer.eval(subset_num_batches=0)


def test_predict_returns_the_forward_outputs_on_the_cpu_in_eval_mode_between_its_events() -> None:
    journal = Journal()
    trainer = _trainer(callbacks=journal)
    trainer.state.model.train()
    outputs = trainer.predict(_loader(10, batch_size=4))
    assert [o.shape for o in outputs] == [torch.Size([4, 2]), torch.Size([4, 2]), torch.Size([2, 2])]
    inputs = torch.cat([x for x, _ in _loader(10, batch_size=4)])
    with torch.no_grad():
        trainer.state.model.eval()
        expected = trainer.state.model((inputs, None))
        trainer.state.model.train()
    torch.testing.assert_close(torch.cat(outputs), expected)
    predict_events = [e for e in journal.events if e.startswith("predict")]
    one_batch = ["predict_batch_start", "predict_before_forward", "predict_after_forward", "predict_batch_end"]
    assert predict_events == ["predict_start", *one_batch * 3, "predict_end"]
    assert trainer.predict(_loader(10, batch_size=4), subset_num_batches=1, return_outputs=False) == []


def test_predict_restores_the_models_mode_and_runs_without_gradients() -> None:
    class NoGrad(Callback):
        def predict_after_forward(self, state, logger) -> None:
            assert not state.outputs.requires_grad and not state.model.training

    trainer = _trainer(callbacks=NoGrad())
    trainer.state.model.train()
    trainer.predict(_loader(8))
    assert trainer.state.model.training


# Traces and Algorithm defaults ---------------------------------------------------------------------
class ReturnsCode(Algorithm):
    def match(self, event, state) -> bool:
        return event is Event.BATCH_END

    def apply(self, event, state, logger) -> int:
        return 3


def test_run_event_returns_traces_with_the_exit_code_that_apply_returned() -> None:
    trainer = _trainer(algorithms=[ReturnsCode()])
    traces = trainer.engine.run_event(Event.BATCH_END)
    assert list(traces) == ["ReturnsCode()/batch_end"]
    trace = traces["ReturnsCode()/batch_end"]
    assert (trace.name, trace.event, trace.exit_code, trace.order, trace.run) == (
        "ReturnsCode", Event.BATCH_END, 3, 0, True
    )  # fmt: skip
    assert dict(trainer.engine.run_event(Event.EPOCH_END)) == {}  # nothing matched


def test_an_algorithms_default_state_dict_is_its_repr_and_it_is_checkpointed(tmp_path) -> None:
    algorithm = ReturnsCode()
    assert algorithm.state_dict() == {"repr": "ReturnsCode()"}
    _trainer(algorithms=algorithm, save_folder=tmp_path, max_duration="1ep").fit()
    payload = ckpt.load_run_checkpoint(ckpt.list_checkpoints(tmp_path)[-1])
    assert payload["algorithms"] == [["ReturnsCode", {"repr": "ReturnsCode()"}]]
    with warnings.catch_warnings(record=True) as caught:  # a run without the stateless method: no warning
        warnings.simplefilter("always")
        _trainer(save_folder=tmp_path, autoresume=True, max_duration="2ep")
    assert not [w for w in caught if "ReturnsCode" in str(w.message)]


# Subsets, save and load arguments -------------------------------------------------------------------
def test_train_and_eval_subset_num_batches_cut_every_epoch_and_evaluation() -> None:
    journal = Journal()
    trainer = _trainer(
        callbacks=journal, train_subset_num_batches=2, eval_dataloader=_loader(16), eval_subset_num_batches=3
    )
    trainer.fit()
    assert trainer.state.timestamp.batch == 4 and trainer.state.timestamp.epoch == 2
    assert trainer.state.dataloader_len == 2
    assert journal.events.count("eval_batch_end") == 2 * 3
    with pytest.raises(ValueError, match=r"train_subset_num_batches=0 must be -1"):
        _trainer(train_subset_num_batches=0)
    with pytest.raises(ValueError, match=r"eval_subset_num_batches=True must be -1"):
        _trainer(eval_subset_num_batches=True)


def test_save_filename_names_the_checkpoints_and_autoresume_and_keep_read_them_back(tmp_path) -> None:
    pattern = "ep{epoch}-ba{batch}-rank{rank}.pt"  # Composer's default name
    _trainer(save_folder=tmp_path, save_filename=pattern, save_interval="2ba", save_num_checkpoints_to_keep=2).fit()
    # every 2 batches, the last two kept: the last batch's, and the end of the run's (after its epoch closed)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path, ckpt.CheckpointNames(pattern))] == [
        "ep1-ba12-rank0.pt",
        "ep2-ba12-rank0.pt",
    ]
    resumed = _trainer(save_folder=tmp_path, save_filename=pattern, autoresume=True, max_duration="3ep")
    assert resumed.state.timestamp.batch == 12
    with pytest.raises(ValueError, match=r"save_filename='ckpt-\{epoch\}\.pt' must contain \{epoch\} and \{batch\}"):
        _trainer(save_folder=tmp_path, save_filename="ckpt-{epoch}.pt")
    with pytest.raises(ValueError, match=r"unknown field\(s\) 'step'"):
        _trainer(save_folder=tmp_path, save_filename="{epoch}-{batch}-{step}.pt")


def _with_momentum(**kwargs) -> Trainer:
    model = mlp_classifier(4, 2)
    return _trainer(model=model, optimizers=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), **kwargs)


def test_load_weights_only_takes_the_weights_and_starts_the_run_at_zero(tmp_path) -> None:
    first = _with_momentum(save_folder=tmp_path / "a")
    first.fit()
    path = ckpt.list_checkpoints(tmp_path / "a")[-1]
    assert ckpt.load_run_checkpoint(path)["optimizers"][0]["state"]  # the checkpoint holds momentum
    second = _with_momentum(load_path=path, load_weights_only=True, max_duration="1ep")
    assert second.state.timestamp.batch == 0
    for a, b in zip(first.state.model.parameters(), second.state.model.parameters()):
        assert torch.equal(a, b)
    assert not second.state.optimizers[0].state  # no momentum taken along
    full = _with_momentum(load_path=path, max_duration="3ep")
    assert full.state.timestamp.batch == 12 and full.state.optimizers[0].state
    second.fit()
    assert second.state.timestamp.batch == 6


def test_load_strict_model_weights_false_allows_missing_keys_and_names_them(tmp_path) -> None:
    _trainer(save_folder=tmp_path, max_duration="1ep").fit()
    path = ckpt.list_checkpoints(tmp_path)[-1]
    bigger = mlp_classifier(4, 2)
    bigger.module.add_module("extra", torch.nn.Linear(2, 2))  # a key the checkpoint lacks
    with pytest.raises(Exception, match="do not fit this model"):
        _trainer(model=bigger, load_path=path, load_weights_only=True)
    with pytest.warns(UserWarning, match=r"non-strictly: missing \['module.extra.weight', 'module.extra.bias'\]"):
        _trainer(model=bigger, load_path=path, load_weights_only=True, load_strict_model_weights=False)


# fit() overrides -----------------------------------------------------------------------------------------
def test_fit_duration_trains_that_much_more_and_reset_time_starts_from_zero() -> None:
    trainer = _trainer(max_duration=None)
    trainer.fit(duration="1ep")
    assert trainer.state.timestamp.batch == 6 and str(trainer.state.max_duration) == "1ep"
    trainer.fit(duration="3ba")
    assert trainer.state.timestamp.batch == 9 and str(trainer.state.max_duration) == "9ba"
    trainer.fit(duration="2ba", reset_time=True)
    assert trainer.state.timestamp.batch == 2 and trainer.state.timestamp.epoch == 0
    with pytest.raises(ValueError, match="duration"):
        trainer.fit(duration="0ba")


def test_fit_with_a_new_train_dataloader_trains_on_it() -> None:
    trainer = _trainer(max_duration="1ep")
    trainer.fit()
    trainer.fit(train_dataloader=_loader(8, batch_size=4, seed=1), duration="1ep")
    assert trainer.state.timestamp.batch == 6 + 2 and trainer.state.dataloader_len == 2
    assert trainer.state.train_dataloader is trainer.state.dataloader


def test_fit_with_new_optimizers_and_schedulers_steps_those() -> None:
    trainer = _trainer(max_duration="2ba", schedulers=CosineAnnealingScheduler())
    trainer.fit()
    model = trainer.state.model
    adam = torch.optim.Adam(model.parameters(), lr=0.01)
    trainer.fit(duration="2ba", optimizers=adam)  # the cadence scheduler follows the new optimizer
    assert trainer.state.optimizers == [adam] and len(adam.state) > 0
    assert trainer.state.schedulers[0].optimizer is adam
    step = torch.optim.lr_scheduler.StepLR(adam, step_size=1)
    trainer.fit(duration="1ep", schedulers=step)
    assert trainer.state.schedulers == [step]
    with pytest.raises(ValueError, match="StepLR is bound to the old one; pass schedulers="):
        trainer.fit(duration="1ba", optimizers=torch.optim.SGD(model.parameters(), lr=0.1))


# Refusals --------------------------------------------------------------------------------------------
def test_composer_arguments_cadence_does_not_take_raise_a_type_error_that_says_what_to_do() -> None:
    with pytest.raises(TypeError) as caught:
        _trainer(spin_dataloaders=False, log_traces=True, max_duraton="1ep")
    message = str(caught.value)
    assert "spin_dataloaders (Composer's; not in cadence's Trainer(): cadence resumes mid-epoch" in message
    assert "log_traces (Composer's; not in cadence's Trainer(): Engine.run_event returns the traces" in message
    assert "max_duraton (unknown; did you mean max_duration?)" in message
    with pytest.raises(TypeError, match=r"fit\(\) got .*precision \(Composer's; not in cadence's fit\(\): pass it to"):
        _trainer().fit(precision="amp_bf16")


def test_auto_microbatching_is_refused_on_the_cpu_with_what_to_use() -> None:
    with pytest.raises(ValueError, match=r"'auto' searches for the largest microbatch .* this run is on cpu"):
        _trainer(device_train_microbatch_size="auto")


def test_the_microbatch_search_halves_on_out_of_memory_and_keeps_the_size_that_fits() -> None:
    model = mlp_classifier(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    state = State(model=model, optimizers=optimizer)
    logged = []

    class Recorder:
        def log_metrics(self, metrics, step=None) -> None:
            logged.append(dict(metrics))

    attempts = []

    def step() -> str:
        assert all(p.grad is None for p in model.parameters())  # a failed attempt's gradients were cleared
        size = state.device_train_microbatch_size or 16
        attempts.append(size)
        model((torch.randn(size, 4), None)).sum().backward()  # partial gradients the search must clear
        if size > 3:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return "done"

    search = MicrobatchSearch(state, Recorder())
    assert search.run(step, batch_size=16) == "done"
    assert attempts == [16, 8, 4, 2] and state.device_train_microbatch_size == 2
    assert logged[-1] == {"trainer/device_train_microbatch_size": 2}
    with pytest.raises(ValueError, match="unrelated"):
        search.run(lambda: (_ for _ in ()).throw(ValueError("unrelated")), batch_size=16)
    state.device_train_microbatch_size = 1
    with pytest.raises(RuntimeError, match=r"even a microbatch of 1 sample does not fit"):
        search.run(lambda: (_ for _ in ()).throw(torch.cuda.OutOfMemoryError("CUDA out of memory")), batch_size=16)


@pytest.mark.gpu
def test_auto_microbatching_finds_a_size_that_fits_on_a_gpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from cadence import Classifier

    width = 1 << 18  # about 1 MiB of activations per sample and layer output: a batch of `samples` needs ~4x free
    free, _ = torch.cuda.mem_get_info()
    samples = int(free // (width * 4))
    data = TensorDataset(torch.randn(samples, 64), torch.randint(0, 2, (samples,)))
    model = torch.nn.Sequential(torch.nn.Linear(64, width), torch.nn.ReLU(), torch.nn.Linear(width, 2))
    trainer = Trainer(
        model=Classifier(model, num_classes=2),
        train_dataloader=DataLoader(data, batch_size=samples),
        max_duration="2ba",
        device="gpu",
        precision="fp32",
        device_train_microbatch_size="auto",
        progress_bar=False,
    )
    trainer.fit()
    found = trainer.state.device_train_microbatch_size
    assert found is not None and found < samples and trainer.state.timestamp.batch == 2
