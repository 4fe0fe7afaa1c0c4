"""Costs that do not depend on a busy machine: training FLOPs counted once per distinct piece of work (checked
by hand on a Linear layer, and against each batch counted on its own under progressive resizing and ColOut),
SAM's second pass, process CPU time, and a whole run through the harness (cyclic, evaluations at each cycle's
end carrying the costs spent up to them)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from mlflow.tracking import MlflowClient
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.flop_counter import FlopCounterMode

from cadence import Algorithm, Classifier, Event, Trainer
from cadence.registry import registry
from cadence_harness.running.bridge import load_mlflow_records
from cadence_harness.running.flops import FlopCounter
from cadence_harness.running.plan import expand
from cadence_harness.running.run import execute
from cadence_harness.running.runspec import RunSpec

IN, OUT, BATCH = 6, 5, 8


def linear_flops(samples: int, backward: bool = True) -> int:
    """A Linear layer on `samples` inputs that need no gradient: forward 2·N·in·out, the weight's gradient as much."""
    return 2 * samples * IN * OUT * (2 if backward else 1)


class ScoreAndHalve(Algorithm):
    """On odd batches, as selective backprop does: one no-grad forward over the whole batch, then keep half."""

    events = (Event.AFTER_DATALOADER,)

    def match(self, event: Event, state: Any) -> bool:
        return event is Event.AFTER_DATALOADER and state.timestamp.batch % 2 == 1

    def apply(self, event: Event, state: Any, logger: Any) -> None:
        images, labels = state.batch
        with torch.no_grad():
            state.model((images, labels))
        # the counter's hook that ends a counted forward removed itself: later forwards pay one hook, not two
        assert not state.model._forward_hooks and len(state.model._forward_pre_hooks) == 1
        state.batch = (images[: len(images) // 2], labels[: len(labels) // 2])


def train(batches: int, algorithms: list[Algorithm] = (), microbatch: int | None = None) -> FlopCounter:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(4 * BATCH, IN), torch.randint(0, OUT, (4 * BATCH,)))
    model = Classifier(torch.nn.Linear(IN, OUT), OUT)
    counter = FlopCounter()
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(data, batch_size=BATCH),
        eval_dataloader=DataLoader(data, batch_size=BATCH),
        eval_interval="1ba",  # evaluations run forwards too: they must not count
        max_duration=f"{batches}ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        algorithms=list(algorithms),
        callbacks=[counter],
        device_train_microbatch_size=microbatch,
        progress_bar=False,
        seed=0,
    )
    trainer.fit()
    trainer.close()
    return counter


def test_flops_of_a_linear_layer_match_the_count_by_hand() -> None:
    counter = train(batches=3)
    assert counter.total == 3 * linear_flops(BATCH)
    assert counter.summary() == {"final/flops": 3 * linear_flops(BATCH), "final/flop_shapes": 1.0}  # counted once
    microbatched = train(batches=3, microbatch=BATCH // 2)
    assert microbatched.total == 3 * linear_flops(BATCH) and sum(microbatched.counts.values()) == 6


def test_work_that_changes_shape_is_counted_as_what_ran() -> None:
    counter = train(batches=4, algorithms=[ScoreAndHalve()])
    full, halved = 2, 2  # batches 0 and 2 train on 8 samples; 1 and 3 score 8, then train on 4
    expected = full * linear_flops(BATCH) + halved * (linear_flops(BATCH, backward=False) + linear_flops(BATCH // 2))
    assert counter.total == expected
    assert len(counter.flops) == 3  # three distinct pieces of work, each measured once: step of 8, step of 4, scoring


class HalveBetween(Algorithm):
    """Halves the batches from batch `start` to batch `stop` (excluded): one shape, another, the first again."""

    events = (Event.AFTER_DATALOADER,)

    def __init__(self, start: int, stop: int) -> None:
        self.start, self.stop = start, stop

    def match(self, event: Event, state: Any) -> bool:
        return self.start <= state.timestamp.batch < self.stop

    def apply(self, event: Event, state: Any, logger: Any) -> None:
        images, labels = state.batch
        state.batch = (images[: len(images) // 2], labels[: len(labels) // 2])


@pytest.mark.parametrize(
    ("algorithms", "microbatch", "expected"),
    [  # {(samples a step trained on, or "scoring"): occurrences}
        ([HalveBetween(3, 6)], None, {BATCH: 7, BATCH // 2: 3}),  # repeats, a switch, and back to counted work
        ([], BATCH // 2, {BATCH // 2: 20}),  # two microbatches a step, the same work
        ([ScoreAndHalve()], None, {BATCH: 5, BATCH // 2: 5, "scoring": 5}),  # alternating work: no repeats
    ],
)
def test_every_occurrence_is_counted_whether_the_work_repeats_or_alternates(
    algorithms: list[Algorithm], microbatch: int | None, expected: dict[Any, int]
) -> None:
    counter = train(batches=10, algorithms=algorithms, microbatch=microbatch)
    counts = {("scoring" if key[0] == "forward" else key[1][0][0][0]): n for key, n in counter.counts.items()}
    assert counts == expected
    assert counter.counts is counter.counts and sum(counter.counts.values()) == sum(expected.values())


def conv_net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, OUT)
    )


def step_flops(net: torch.nn.Module, images: torch.Tensor) -> int:
    """One training step on `images`, counted on its own: forward, loss and backward."""
    with FlopCounterMode(display=False) as mode:
        torch.nn.functional.cross_entropy(net(images), torch.zeros(len(images), dtype=torch.long)).backward()
    return int(mode.get_total_flops())


@pytest.mark.parametrize(
    ("name", "kwargs", "sizes"),
    [  # progressive resizing grows the images batch by batch; ColOut drops as many rows and columns each batch
        ("progressive_resizing", {"delay_fraction": 0.0, "finetune_fraction": 0.0}, 3),
        ("colout", {"p_row": 0.3}, 1),
    ],
)
def test_methods_that_shrink_images_are_counted_batch_by_batch(name: str, kwargs: dict[str, Any], sizes: int) -> None:
    if name not in registry().methods:
        pytest.skip(f"needs cadence-{name.replace('_', '-')}")
    data = TensorDataset(torch.rand(6 * BATCH, 3, 16, 16), torch.randint(0, OUT, (6 * BATCH,)))
    model, counter, seen = Classifier(conv_net(), OUT), FlopCounter(), []
    model.register_forward_pre_hook(lambda module, args: seen.append(args[0][0].shape) if module.training else None)
    trainer = Trainer(
        model=model,
        train_dataloader=DataLoader(data, batch_size=BATCH),
        max_duration="6ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.1),
        algorithms=[registry().method(name).algorithm(**kwargs, seed=0)],
        callbacks=[counter],
        progress_bar=False,
        seed=0,
    )
    trainer.fit()
    trainer.close()
    assert len(seen) == 6 and len(set(seen)) >= sizes and all(s[-2:] != (16, 16) for s in seen[:-1]), seen
    net = conv_net()
    assert counter.total == sum(step_flops(net, torch.rand(shape)) for shape in seen)  # each batch on its own
    assert len(counter.flops) == len(set(seen))


def test_a_closure_optimizer_second_pass_is_counted() -> None:
    if "sam" not in registry().methods:
        pytest.skip("needs cadence-sam")
    counter = train(batches=3, algorithms=[registry().method("sam").algorithm()])
    assert counter.total == 2 * 3 * linear_flops(BATCH) and sum(counter.counts.values()) == 6  # SAM: two passes


def test_a_cyclic_run_records_its_costs_at_each_cycle_end(tiny_recipe: Any, tracking_uri: str) -> None:
    recipe = tiny_recipe(
        durations=["1ba", "2ba"],
        duration="2ba",
        curve="cyclic",
        eval_interval="1ep",  # 2 batches per epoch here: the cycle ends add the evaluation after batch 1
        schedule={"name": "cosine_warmup", "t_warmup": "0.5dur"},
    )
    spec = expand(recipe)[0]
    assert spec.cycles == ("1ba", "2ba")
    result = execute(spec, tracking_uri=tracking_uri, progress_bar=False)
    (record,) = load_mlflow_records(MlflowClient(tracking_uri), ["tiny"])
    assert [point["cycle_end"] for point in record.evals] == [1.0, 2.0]  # one evaluation at each cycle's end
    first, last = record.evals
    assert last["flops"] == 2 * first["flops"] == result.metrics["final/flops"] > 0  # same shape both batches
    assert 0 < first["cpu_s"] <= last["cpu_s"] <= result.metrics["final/cpu_s"]  # the end of fit() comes after
    assert first["train_s"] <= last["train_s"] <= result.metrics["final/train_s"]
    assert record.tag("curve") == "cyclic" and record.cycles == ("1ba", "2ba") and record.tag("budget") == "2ba"
    assert RunSpec.from_json(spec.to_json()) == spec


def test_the_structure_key_follows_surgery_and_freezing_without_walking_the_model_each_step() -> None:
    from cadence_harness.running.flops import _Structure

    structure = _Structure()
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    before = structure(model)
    model[0] = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())  # surgery registers modules
    after = structure(model)
    assert after[1] == before[1] + 2 and after[2] == before[2]
    model[0][0].weight.requires_grad_(False)  # freezing registers nothing, and is still seen
    assert structure(model)[2] == after[2] - 1
    structure.close()


def test_a_compiled_run_counts_eagerly_then_compiles_and_times_both_first_steps_apart() -> None:
    """The counted step runs under FlopCounterMode, where Dynamo cannot trace (torch up to 2.13 then never compiles
    that code again): it runs eagerly, the next step compiles, and both are timed apart, not as training."""
    from cadence_harness.running.timing import RunTimer

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(4 * BATCH, IN), torch.randint(0, OUT, (4 * BATCH,)))
    model = Classifier(torch.nn.Linear(IN, OUT), OUT)
    timer = RunTimer()
    counter = FlopCounter(on_count=timer.time_apart, occurrences_apart=2)
    trainer = Trainer(model=model, train_dataloader=DataLoader(data, batch_size=BATCH), max_duration="4ba",
                      optimizers=torch.optim.SGD(model.parameters(), lr=0.1), callbacks=[timer, counter],
                      progress_bar=False, seed=0, compile_config={"backend": "eager"})  # fmt: skip
    trainer.fit()
    trainer.close()
    assert counter.total == 4 * linear_flops(BATCH)  # the eager count, as an uncompiled run's
    assert timer.shape_warmups == 2  # the counted step and the compiling one
    assert trainer.compiled is not None and trainer.compiled.forward.eager_calls == 1
    assert trainer.compiled.forward.compiled_calls == 3
    with pytest.raises(ValueError, match=r"occurrences_apart=0: use 1, 2 for a compiled forward, 3 with CUDA"):
        FlopCounter(occurrences_apart=0)
    from cadence_harness.running.run import occurrences_apart

    assert [occurrences_apart(mode) for mode in (False, True, "default", "reduce-overhead")] == [1, 2, 2, 3]
