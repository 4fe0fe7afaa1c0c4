"""FSDP2 in one process: the configuration's checks, the blocks wrapped, one sharded process equal to one
unsharded, and sharded checkpoints (resharded into an unsharded run, guarded as single files are).

Two processes: test_fsdp_multiprocess.py.
"""

from __future__ import annotations

import copy
import os
import pickle
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as torch_dist
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from cadence import Algorithm, Event, Trainer
from cadence._fsdp_config import parse_parallelism_config
from cadence._sharding import is_sharded, wrap_targets
from cadence.checkpoint import CheckpointError, checkpoint_to_start_from
from cadence.precision import Precision
from cadence.testing import mlp_classifier, tiny_image_classifier

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _single_process_group() -> Iterator[None]:
    """A sharded Trainer outside torchrun joins a process group of its own process: leave none behind."""
    yield
    from torch.distributed.tensor import DTensor

    if torch_dist.is_initialized() and "WORLD_SIZE" not in os.environ:
        torch_dist.destroy_process_group()
    DTensor._op_dispatcher._allow_implicit_replication = False


# The configuration ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("config", "error", "message"),
    [
        ({"tp": {}}, ValueError, "tensor parallelism is not supported"),
        ({"fdsp": {}}, ValueError, "the one key cadence takes is 'fsdp'"),
        ({"fsdp": {"sharding_stratgy": "FULL_SHARD"}}, ValueError, "did you mean 'sharding_strategy'"),
        ({"fsdp": {"sharding_strategy": "ZERO3"}}, ValueError, "choose one of"),
        ({"fsdp": {"use_orig_params": False}}, ValueError, "use_orig_params=False cannot be honoured"),
        ({"fsdp": {"state_dict_type": "full"}}, ValueError, "checkpoints are written sharded"),
        ({"fsdp": {"activation_checkpointing_reentrant": True}}, ValueError, "non-reentrant"),
        ({"fsdp": {"cpu_offload": True}}, ValueError, "this run is on cpu"),
        ({"fsdp": {"mixed_precision": {"buffer_dtype": "bf16"}}}, ValueError, "buffer_dtype cannot be honoured"),
        ({"fsdp": {"mixed_precision": "HALF"}}, ValueError, "'DEFAULT', 'PURE', 'FULL'"),
        ({"fsdp": {"activation_checkpointing": "yes"}}, TypeError, "must be True or False"),
        ({"fsdp": {"data_parallel_shard_degree": 0}}, ValueError, "positive int"),
        ({"fsdp": "FULL_SHARD"}, TypeError, "pass a dict of FSDP options"),
        ("fsdp", TypeError, "pass a dict such as"),
    ],
)
def test_every_key_it_cannot_honour_is_refused_by_name(config: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        parse_parallelism_config(config, Precision.FP32, CPU)


def test_the_trainer_refuses_a_bad_key_before_anything_runs() -> None:
    model = mlp_classifier(8, 4)
    with pytest.raises(ValueError, match="forward_prefetch=True cannot be honoured"):
        Trainer(model=model, parallelism_config={"fsdp": {"forward_prefetch": True}}, device="cpu", progress_bar=False)
    assert not torch_dist.is_initialized()


def test_composers_keys_map_onto_fully_shard() -> None:
    def parse(fsdp: dict[str, Any], precision: Precision = Precision.FP32) -> Any:
        return parse_parallelism_config({"fsdp": fsdp}, precision, CPU)

    assert parse({}).reshard_after_forward is True and parse({}).shard_degree is None
    assert parse({"sharding_strategy": "SHARD_GRAD_OP"}).reshard_after_forward is False
    assert parse({"sharding_strategy": "NO_SHARD"}).shard_degree == 1
    assert parse({"sharding_strategy": "HYBRID_SHARD", "data_parallel_shard_degree": 4}).shard_degree == 4
    assert parse({"reshard_after_forward": 2}).reshard_after_forward == 2
    dtypes = lambda s: (s.param_dtype, s.reduce_dtype, s.output_dtype)  # noqa: E731
    assert dtypes(parse({})) == (None, None, None)  # fp32: nothing to cast
    assert dtypes(parse({}, Precision.AMP_BF16)) == (torch.bfloat16, torch.float32, None)  # Composer's DEFAULT
    assert dtypes(parse({"mixed_precision": "PURE"}, Precision.AMP_BF16)) == (torch.bfloat16, torch.bfloat16, None)
    assert dtypes(parse({"mixed_precision": "FULL"}, Precision.AMP_BF16)) == (None, None, None)
    custom = parse({"mixed_precision": {"param_dtype": "bf16", "reduce_dtype": torch.float32}})
    assert dtypes(custom) == (torch.bfloat16, torch.float32, None)
    # FSDP1 knobs are accepted with the value that describes FSDP2
    assert parse({"use_orig_params": True, "limit_all_gathers": True, "backward_prefetch": "BACKWARD_PRE"})
    assert parse_parallelism_config(None, Precision.FP32, CPU) is None
    assert parse_parallelism_config({"fsdp": None}, Precision.FP32, CPU) is None


# The blocks wrapped --------------------------------------------------------------------------------
def tiny_gpt2() -> nn.Module:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=2, n_head=2)
    return transformers.GPT2LMHeadModel(config)


def test_the_blocks_wrapped_by_default_are_transformer_and_residual_blocks() -> None:
    assert [type(m).__name__ for m in wrap_targets(tiny_gpt2())] == ["GPT2Block", "GPT2Block"]
    torchvision = pytest.importorskip("torchvision")
    blocks = wrap_targets(torchvision.models.resnet18(num_classes=10))
    assert [type(m).__name__ for m in blocks] == ["BasicBlock"] * 8


def test_a_model_chooses_its_blocks_as_in_composer() -> None:
    net = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4), nn.ReLU()), nn.Linear(4, 2))
    assert wrap_targets(net) == []
    net[1]._fsdp_wrap = True
    assert wrap_targets(net) == [net[1]]
    net.fsdp_wrap_fn = lambda module: isinstance(module, nn.Linear)  # takes precedence over the marks
    assert wrap_targets(net) == [net[0], net[1][0], net[2]]
    from cadence import Classifier

    assert wrap_targets(Classifier(net, num_classes=2)) == [net[0], net[1][0], net[2]]  # found inside a wrapper


# One process ---------------------------------------------------------------------------------------
def _data() -> TensorDataset:
    generator = torch.Generator().manual_seed(3)
    return TensorDataset(torch.randn(64, 8, generator=generator), torch.randint(0, 4, (64,), generator=generator))


def _trainer(fsdp: dict[str, Any] | None, model: nn.Module | None = None, **kwargs: Any) -> Trainer:
    torch.manual_seed(0)
    model = model if model is not None else mlp_classifier(8, 4, hidden=16)
    options: dict[str, Any] = {
        "model": model,
        "train_dataloader": DataLoader(_data(), batch_size=16, shuffle=True),
        "max_duration": "4ba",
        "optimizers": torch.optim.AdamW(model.parameters(), lr=0.01),
        "seed": 7,
        "device": "cpu",
        "progress_bar": False,
        "parallelism_config": None if fsdp is None else {"fsdp": fsdp},
    }
    return Trainer(**{**options, **kwargs})


def _weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    full = get_model_state_dict(trainer.state.model, options=StateDictOptions(full_state_dict=True))
    return {name: tensor.detach().clone() for name, tensor in full.items()}


@pytest.mark.parametrize(
    "fsdp", [{}, {"sharding_strategy": "SHARD_GRAD_OP"}, {"sharding_strategy": "NO_SHARD"}, {"auto_wrap": False}]
)
def test_one_sharded_process_equals_one_unsharded(fsdp: dict[str, Any]) -> None:
    plain = _trainer(None)
    plain.fit()
    sharded = _trainer(fsdp)
    assert is_sharded(sharded.state.model) and not is_sharded(plain.state.model)
    sharded.fit()
    expected, got = _weights(plain), _weights(sharded)
    assert expected.keys() == got.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=0)


@pytest.mark.parametrize(
    "options",
    [
        {"device_train_microbatch_size": 4},  # every microbatch reduce-scatters: the same sum
        {"precision": "amp_bf16"},  # Composer's mixed_precision DEFAULT: bf16 compute, fp32 reduction
        {"compile_config": {"backend": "eager"}},
    ],
)
def test_microbatches_mixed_precision_compile_and_evaluation_equal_one_unsharded(options: dict[str, Any]) -> None:
    generator = torch.Generator().manual_seed(5)
    evaluation = TensorDataset(torch.randn(40, 8, generator=generator), torch.randint(0, 4, (40,), generator=generator))
    runs = []
    for fsdp in (None, {}):
        trainer = _trainer(fsdp, eval_dataloader=DataLoader(evaluation, batch_size=10), **options)
        trainer.fit()
        runs.append((trainer.eval(), _weights(trainer)))
    (plain_metrics, plain), (sharded_metrics, sharded) = runs
    assert sharded_metrics == plain_metrics
    for name in plain:
        torch.testing.assert_close(sharded[name], plain[name], rtol=0, atol=0)


def test_a_transformer_with_activation_checkpointing_equals_one_unsharded() -> None:
    from cadence import HuggingFaceModel

    ids = torch.randint(0, 64, (32, 12), generator=torch.Generator().manual_seed(1))
    loader = DataLoader(
        TensorDataset(ids),
        batch_size=8,
        collate_fn=lambda s: {"input_ids": torch.stack([x[0] for x in s]), "labels": torch.stack([x[0] for x in s])},
    )
    runs = []
    for fsdp in (None, {"activation_checkpointing": True}):
        torch.manual_seed(0)
        trainer = _trainer(fsdp, HuggingFaceModel(tiny_gpt2()), train_dataloader=loader)
        trainer.fit()
        runs.append(_weights(trainer))
    assert runs[0].keys() == runs[1].keys()
    for name in runs[0]:
        torch.testing.assert_close(runs[1][name], runs[0][name], rtol=0, atol=1e-6)


def test_an_optimizer_that_has_stepped_is_refused() -> None:
    torch.manual_seed(0)
    model = mlp_classifier(8, 4, hidden=16)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 8)).sum().backward()
    optimizer.step()
    with pytest.raises(ValueError, match="has stepped already"):
        _trainer({}, model, optimizers=optimizer)


class LateSurgery(Algorithm):
    """A surgery method that would change the model after it is sharded."""

    apply_at = "fit_start"

    def match(self, event: Event, state: Any) -> bool:
        return False

    def apply(self, event: Event, state: Any, logger: Any) -> None: ...

    def required_on_load(self) -> bool:
        return True


def test_channels_last_weights_are_refused() -> None:
    model = tiny_image_classifier(4).to(memory_format=torch.channels_last)  # what ChannelsLast does
    with pytest.raises(ValueError, match=r"module\.features\.0\.weight is not contiguous.*ChannelsLast"):
        _trainer({}, model)


class StochasticDepth(Algorithm):
    """Stands in for cadence_stochastic_depth's (the core's tests import no method): its name and mode."""

    stochastic_method = "block"

    def match(self, event: Event, state: Any) -> bool:
        return False

    def apply(self, event: Event, state: Any, logger: Any) -> None: ...


def test_methods_that_skip_blocks_per_rank_are_refused() -> None:
    with pytest.raises(ValueError, match=r"stochastic_method='block'.*hangs"):
        _trainer({}, algorithms=[StochasticDepth()])


def test_surgery_after_sharding_is_refused() -> None:
    with pytest.raises(ValueError, match=r"LateSurgery.*apply_at='init'"):
        _trainer({}, algorithms=[LateSurgery()])


# Sharded checkpoints -------------------------------------------------------------------------------
def test_a_sharded_checkpoint_resumes_exactly_and_loads_into_an_unsharded_run(tmp_path: Path) -> None:
    uninterrupted = _trainer(None)
    uninterrupted.fit()
    first = _trainer({}, save_folder=tmp_path, save_interval="2ba", max_duration="2ba")
    first.fit()
    first.close()
    checkpoint = tmp_path / "ep0-ba2.pt"
    assert checkpoint.is_dir() and {".metadata", "cadence.pt", "__0_0.distcp"} <= {p.name for p in checkpoint.iterdir()}
    assert (tmp_path / "latest.pt").resolve() == checkpoint.resolve()
    expected = _weights(uninterrupted)
    for fsdp in ({}, None):  # resumed sharded, and resharded into one unsharded process
        folder = tmp_path / f"resume-{fsdp is None}"
        shutil.copytree(checkpoint, folder / "ep0-ba2.pt")
        resumed = _trainer(fsdp, save_folder=folder, save_interval="2ba", autoresume=True)
        assert int(resumed.state.timestamp.batch) == 2
        resumed.fit()
        for name, value in _weights(resumed).items():
            torch.testing.assert_close(value, expected[name], rtol=0, atol=0)
        resumed.close()
    inference = _trainer(None, load_path=checkpoint, load_weights_only=True)
    loaded = _weights(inference)
    assert int(inference.state.timestamp.batch) == 0
    assert not torch.equal(next(iter(loaded.values())), next(iter(_weights(_trainer(None)).values())))


def test_a_single_file_checkpoint_resumes_sharded_exactly(tmp_path: Path) -> None:
    uninterrupted = _trainer(None)
    uninterrupted.fit()
    first = _trainer(None, save_folder=tmp_path, save_interval="2ba", max_duration="2ba")
    first.fit()
    first.close()
    assert (tmp_path / "ep0-ba2.pt").is_file()
    resumed = _trainer({}, save_folder=tmp_path, save_interval="2ba", autoresume=True)
    assert int(resumed.state.timestamp.batch) == 2 and is_sharded(resumed.state.model)
    resumed.fit()
    expected = _weights(uninterrupted)
    for name, value in _weights(resumed).items():
        torch.testing.assert_close(value, expected[name], rtol=0, atol=0)
    resumed.close()
    assert (tmp_path / "ep0-ba4.pt").is_dir()  # it goes on writing sharded checkpoints


def test_sharded_checkpoints_keep_the_no_overwrite_and_fallback_guarantees(tmp_path: Path) -> None:
    options = {"save_interval": "1ba", "save_num_checkpoints_to_keep": 2, "max_duration": "3ba"}
    trainer = _trainer({}, save_folder=tmp_path, **options)
    trainer.fit()
    trainer.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ep0-ba2.pt", "ep0-ba3.pt", "latest.pt"]
    with pytest.raises(ValueError, match="already holds checkpoints"):
        _trainer({}, save_folder=tmp_path)
    (tmp_path / "ep0-ba3.pt" / ".metadata").unlink()  # the newest is damaged: autoresume falls back
    stale = tmp_path / ".ep0-ba4.pt.abc123.tmp"  # a killed writer's folder
    stale.mkdir()
    (stale / "__0_0.distcp").write_bytes(b"partial")
    with pytest.warns(RuntimeWarning, match="autoresume skips .*ep0-ba3.pt.*without DCP's .metadata"):
        path, payload = checkpoint_to_start_from(tmp_path, None, True, False)
    assert path.name == "ep0-ba2.pt" and payload["sharded"] and payload["timestamp"]["batch"] == 2
    assert not stale.exists()


class _RunsCode:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("touch pwned",))


def test_loading_never_runs_code_from_a_sharded_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trainer = _trainer({}, save_folder=tmp_path / "run", save_interval="2ba", max_duration="2ba")
    trainer.fit()
    trainer.close()
    checkpoint = tmp_path / "run" / "ep0-ba2.pt"
    metadata = checkpoint / ".metadata"
    monkeypatch.chdir(tmp_path)
    original = metadata.read_bytes()
    metadata.write_bytes(pickle.dumps(_RunsCode()))
    with pytest.raises(CheckpointError, match=r"DCP \.metadata cannot be used.*(posix|os)\.system"):
        _trainer(None, load_path=checkpoint)
    assert not (tmp_path / "pwned").exists()
    metadata.write_bytes(original)
    payload = copy.deepcopy(torch.load(checkpoint / "cadence.pt", weights_only=True))
    payload["algorithms"] = _RunsCode()  # the run's own file is loaded with weights_only=True
    torch.save(payload, checkpoint / "cadence.pt")
    with pytest.raises(CheckpointError, match=r"cannot use checkpoint .*cadence\.pt"):
        _trainer(None, load_path=checkpoint)
    assert not (tmp_path / "pwned").exists()


@pytest.mark.gpu
@pytest.mark.parametrize("fsdp", [{"cpu_offload": True}, {"mixed_precision": "DEFAULT"}])
def test_on_a_gpu_offloading_and_mixed_precision_train_as_one_unsharded_process(fsdp: dict[str, Any]) -> None:
    """Not run here (no GPU): CPUOffloadPolicy needs CUDA, and NCCL joins the one-process group."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    runs = []
    for config in (None, fsdp):
        trainer = _trainer(config, device="gpu", precision="amp_bf16")
        trainer.fit()
        runs.append({name: value.float().cpu() for name, value in _weights(trainer).items()})
    for name in runs[0]:
        torch.testing.assert_close(runs[1][name], runs[0][name], rtol=0, atol=5e-2)  # bf16 weights in FSDP
