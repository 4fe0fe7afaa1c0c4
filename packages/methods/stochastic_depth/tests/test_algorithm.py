"""StochasticDepth adapter: events, warm-up, DDP flag, checkpoints after surgery, export paths, refusals."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from cadence_stochastic_depth import StochasticDepth, apply_stochastic_depth, is_stochastic
from torch.utils.data import DataLoader, TensorDataset

import cadence
from cadence import Callback, Classifier, Event, InMemoryLogger, Resource, State, Trainer

tv = pytest.importorskip("torchvision")
HERE = Path(__file__).parent


def _trainer(algorithms: list, model: torch.nn.Module | None = None, **kwargs) -> Trainer:
    data = torch.Generator().manual_seed(1)
    dataset = TensorDataset(torch.rand(16, 3, 32, 32, generator=data), torch.randint(0, 4, (16,), generator=data))
    torch.manual_seed(0)
    model = model or Classifier(tv.models.resnet.ResNet(tv.models.resnet.BasicBlock, [1, 1, 1, 1], num_classes=4), 4)
    return Trainer(
        model=model,
        train_dataloader=DataLoader(dataset, batch_size=4),
        max_duration=kwargs.pop("max_duration", "2ba"),
        optimizers=torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
        algorithms=algorithms,
        seed=3,
        device="cpu",
        progress_bar=False,
        **kwargs,
    )


def test_events_effects_ddp_flag_and_repr() -> None:
    state = State(model=torch.nn.Linear(2, 2), max_duration="4ba")
    plain = StochasticDepth("ResNetBasicBlock")
    assert [e for e in Event if plain.match(e, state)] == [Event.INIT]
    warm = StochasticDepth("ResNetBasicBlock", drop_warmup="2ba")
    assert [e for e in Event if warm.match(e, state)] == [Event.INIT, Event.BATCH_START]
    assert plain.effects().writes == {Resource.MODEL} and plain.required_on_load()
    assert plain.find_unused_parameters and not StochasticDepth("ResNetBasicBlock", "sample").find_unused_parameters
    assert StochasticDepth().target_layer_name == "ResNetBlock"  # Composer requires it: both ResNet blocks here
    assert repr(StochasticDepth("ResNetBottleneck", drop_rate=0.1, seed=2)) == (
        "StochasticDepth(target_layer_name='ResNetBottleneck', stochastic_method='block', drop_rate=0.1, "
        "drop_distribution='linear', drop_warmup='0.0dur', seed=2, strict=False)"
    )


class RecordRates(Callback):
    def __init__(self):
        self.rates: list[list[float]] = []

    def before_forward(self, state: State, logger) -> None:
        self.rates.append([m.drop_rate for m in state.model.modules() if is_stochastic(m)])


@pytest.mark.parametrize("method", ["block", "sample"])  # Composer refuses a warm-up for 'sample'; it works the same
def test_warmup_scales_the_rates_by_the_elapsed_fraction_of_the_warmup(method: str) -> None:
    record = RecordRates()
    algorithm = StochasticDepth("ResNetBasicBlock", method, drop_rate=0.8, drop_warmup="0.5dur")  # 2 of 4 batches
    _trainer([algorithm], callbacks=[record], max_duration="4ba").fit()
    full = [(i + 1) / 4 * 0.8 for i in range(4)]
    expected = [[f * rate for rate in full] for f in (0.0, 0.5, 1.0, 1.0)]
    assert len(record.rates) == 4
    for seen, wanted in zip(record.rates, expected):
        assert seen == pytest.approx(wanted)


def test_composers_metrics_are_logged() -> None:
    logger = InMemoryLogger()
    _trainer([StochasticDepth("ResNetBasicBlock", drop_rate=0.4, drop_warmup="2ba")], loggers=[logger]).fit()
    assert logger.most_recent_values["stochastic_depth/num_stochastic_layers"] == 4  # one BasicBlock per stage
    _, rates = logger.steps_and_values("stochastic_depth/drop_rate")
    assert rates == pytest.approx([0.0, 0.2])  # Composer logs the rate of each warm-up batch


def test_a_checkpoint_after_surgery_loads_into_a_fresh_model_only_with_the_method(tmp_path: Path) -> None:
    trained = _trainer([StochasticDepth("ResNetBasicBlock", seed=0)], save_folder=tmp_path, save_interval="2ba")
    trained.fit()
    resumed = _trainer([StochasticDepth("ResNetBasicBlock", seed=0)], load_path=tmp_path / "ep0-ba2.pt")
    x = torch.rand(2, 3, 32, 32)
    trained.state.model.eval(), resumed.state.model.eval()
    assert torch.equal(trained.state.model.module(x), resumed.state.model.module(x))
    refused = r"add StochasticDepth\(target_layer_name='ResNetBasicBlock'"
    with pytest.raises(cadence.CheckpointMismatchError, match=refused):
        _trainer([], load_path=tmp_path / "ep0-ba2.pt")


@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning")
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:FutureWarning")
def test_export_paths() -> None:
    """FX and torch.export trace the eval model (deterministic: the form one exports); torch.compile matches eager
    in eval and compiles the training path too (dynamo breaks the graph at the draw from an explicit generator, and
    warns about the non-leaf tensor it hands over there: torch's warning, not an error)."""
    torch.manual_seed(0)
    model = tv.models.resnet18(num_classes=4)
    apply_stochastic_depth(model, "ResNetBasicBlock", "sample", 0.5, generator=torch.Generator())
    x = torch.rand(2, 3, 32, 32)
    eager = model.eval()(x)
    torch.testing.assert_close(torch.fx.symbolic_trace(model)(x), eager)
    torch.testing.assert_close(torch.export.export(model, (x,)).module()(x), eager)
    torch.testing.assert_close(torch.jit.script(model).eval()(x), eager)  # Composer's layout scripts, as Composer's
    small = tv.models.resnet.ResNet(tv.models.resnet.BasicBlock, [1, 1, 1, 1], num_classes=4)
    apply_stochastic_depth(small, "ResNetBasicBlock", "sample", 0.5, generator=torch.Generator().manual_seed(0))
    compiled = torch.compile(small.eval())
    torch.testing.assert_close(compiled(x), small(x), rtol=1e-4, atol=1e-4)
    small.train()
    state = small.layer1[0].generator.get_state()
    trained = compiled(x)
    small.layer1[0].generator.set_state(state)  # one generator is shared by all blocks: replay the same draws
    # another draw would drop another block (a difference of order 1); Inductor's fused batch-norm reductions
    # in training mode differ from eager's by up to 2e-4 on some CPUs (AMD EPYC family 25)
    torch.testing.assert_close(trained, small(x), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"drop_rate": 1.5}, "`drop_rate`=1.5"),
        ({"drop_rate": -0.2}, "`drop_rate`=-0.2"),
        ({"target_layer_name": "ResNet"}, "`target_layer_name`='ResNet'"),
        ({"stochastic_method": "blocks"}, "`stochastic_method`='blocks'.*did you mean 'block'"),
        ({"drop_distribution": "linaer"}, "`drop_distribution`='linaer'"),
        ({"drop_warmup": "2dur"}, "`drop_warmup`='2dur'"),
        ({"drop_warmup": "10sp"}, "`drop_warmup`='10sp'"),
        ({"drop_warmup": "soon"}, "`drop_warmup`='soon' is not a time"),
        ({"seed": -1}, "`seed`=-1"),
        ({"strict": "yes"}, "`strict`='yes'"),
    ],
)
def test_bad_hyperparameters_are_refused_at_construction(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        StochasticDepth(**{"target_layer_name": "ResNetBasicBlock", **kwargs})


@pytest.mark.slow
def test_ddp_with_microbatches_and_dropped_blocks_trains_and_needs_find_unused_parameters(tmp_path: Path) -> None:
    """2 gloo processes, 2 microbatches per batch, each rank dropping its own blocks: the run finishes with equal
    replicas. The control (DDP not told about unused parameters) fails instead of training."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    run = subprocess.run([*launch, str(HERE / "ddp_run.py"), str(tmp_path)], env=env, capture_output=True, timeout=300)
    assert run.returncode == 0, run.stderr.decode()[-4000:]
    rank0, rank1 = (torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in (0, 1))
    assert rank0["drops"] != rank1["drops"]  # the ranks dropped different blocks
    for name, value in rank0["weights"].items():  # DDP kept the replicas equal
        assert torch.equal(rank1["weights"][name], value), name
    control = subprocess.run(
        [*launch, str(HERE / "ddp_run.py"), str(tmp_path / "control"), "control"],
        env=env,
        capture_output=True,
        timeout=300,
    )
    assert control.returncode != 0 and b"find_unused_parameters" in control.stderr


def test_surgery_keeps_the_trainers_optimizer_and_copies_nothing() -> None:
    trainer = _trainer([StochasticDepth("ResNetBasicBlock")])
    model = trainer.state.model
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    assert {id(p) for g in trainer.state.optimizers[0].param_groups for p in g["params"]} == trainable
    assert trainer.state.algorithms[0].report.count == 4
    before = copy.deepcopy(model.state_dict())
    trainer.fit()
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
