"""GyroDropoutLayer and apply_gyro_dropout: Composer's definition (y = x * mask / (1 - p), rows constant in blocks of
B/tau), the pool and its schedule, state, surgery on stock models, export paths, refusals."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from cadence_gyro_dropout import GyroDropoutLayer, apply_gyro_dropout
from torch import nn

from cadence.ops import NoEffectWarning
from cadence.testing import assert_same_tensors


def _layer(iters: int = 196, epochs: float = 100, p: float = 0.5, sigma: int = 256, tau: int = 16, seed: int = 0):
    return GyroDropoutLayer(iters, epochs, p, sigma, tau, generator=torch.Generator().manual_seed(seed)).train()


def test_output_is_x_times_the_mask_over_one_minus_p_and_rows_are_constant_in_blocks() -> None:
    """Composer's two tests (196 iterations x 100 epochs, p=0.5, sigma=256, tau=16, 256 x 512 inputs)."""
    layer = _layer()
    x = torch.randn(256, 512)
    y = layer(x)
    pool, picked = layer.preselect_masks, layer.selected_masks
    mask = pool[picked].float().repeat_interleave(256 // 16, dim=0)  # Composer's dropout_mask
    assert torch.equal(y, x * mask * (1 / (1 - 0.5)))
    blocks = mask.view(16, 16, 512)  # blocks of B / tau = 16 rows
    assert torch.equal(blocks, blocks[:, :1].expand_as(blocks))
    assert layer.period == int(196 * 100 / 256) * 16 == 1216
    assert torch.equal(layer.dropout_mask, mask)  # exposed as Composer's attribute
    for i, j in [(0, 0), (17, 300), (255, 511)]:  # Composer's element-wise check, on a few elements
        assert x[i][j] * layer.dropout_mask[i][j] * (1 / (1 - layer.p)) == y[i][j]


def test_the_pool_keeps_each_unit_with_probability_one_minus_p() -> None:
    layer = _layer(p=0.3, sigma=512)
    layer(torch.ones(16, 256))
    kept = layer.preselect_masks.float().mean().item()
    assert layer.preselect_masks.shape == (512, 256)
    assert abs(kept - 0.7) < 4 * math.sqrt(0.3 * 0.7 / (512 * 256))


def test_picks_change_every_period_steps_and_the_pool_never() -> None:
    layer = _layer(iters=10, epochs=2, sigma=8, tau=2)  # period int(20 / 8) * 2 = 4
    assert layer.period == 4
    picks = []
    for _ in range(12):
        layer(torch.ones(4, 6))
        picks.append(layer.selected_masks)
    pool = layer.preselect_masks.clone()
    assert all(picks[i] is picks[i - i % 4] for i in range(12)) and len({id(t) for t in picks}) == 3
    layer(torch.ones(4, 6))
    assert torch.equal(layer.preselect_masks, pool) and layer.training_step == 13


def test_evaluation_is_the_identity_and_short_runs_pick_every_step() -> None:
    layer = _layer(iters=2, epochs=1, sigma=256)
    x = torch.rand(3, 5)
    assert layer.eval()(x) is x and layer.preselect_masks.numel() == 0
    assert layer.period == 1  # Composer divides by int(2 / 256) * 16 = 0 here


def test_any_batch_size_and_any_number_of_dimensions() -> None:
    layer = _layer(sigma=32, tau=16)
    x = torch.rand(3, 7, 10)  # B < tau, a (B, T, F) input: one mask per sample over the last dimension
    y = layer(x)
    rows = layer.preselect_masks[layer.selected_masks[torch.tensor([0, 5, 10])]]  # row i: mask i * tau // B
    torch.testing.assert_close(y, x * rows[:, None, :].float() * 2)
    assert layer(torch.rand(1, 10)).shape == (1, 10) and layer(torch.rand(17, 10)).shape == (17, 10)
    with pytest.raises(ValueError, match="drew its masks for 10 units"):
        layer(torch.rand(2, 11))


def test_the_state_dict_carries_the_pool_the_picks_and_the_step() -> None:
    layer = _layer(iters=10, epochs=2, sigma=8, tau=2)
    for _ in range(3):
        layer(torch.ones(4, 6))
    fresh = _layer(iters=10, epochs=2, sigma=8, tau=2, seed=1)
    fresh.load_state_dict(layer.state_dict())
    assert_same_tensors(fresh.state_dict(), layer.state_dict(), "layer")
    generator_state = layer.generator.get_state()
    fresh.generator.set_state(generator_state)
    x = torch.rand(4, 6)
    assert torch.equal(fresh(x), layer(x)) and torch.equal(fresh(x), layer(x))  # the next pick too


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.2), nn.ReLU(), nn.Dropout(0.0), nn.Linear(16, 4))


def test_surgery_replaces_dropout_that_drops_keeps_parameters_and_is_idempotent() -> None:
    model = _model().double()
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.rand(2, 8, dtype=torch.float64)).sum().backward()
    optimizer.step()
    before = copy.deepcopy(optimizer.state_dict())
    report = apply_gyro_dropout(model, 10, 3, p=0.5, sigma=4, tau=2)
    assert report.replaced == {"Dropout -> GyroDropoutLayer": ["1"]}  # the p=0 placeholder is left alone
    assert isinstance(model[1], GyroDropoutLayer) and type(model[3]) is nn.Dropout
    assert_same_tensors(optimizer.state_dict(), before, "optimizer")
    assert model.train()(torch.rand(4, 8, dtype=torch.float64)).dtype == torch.float64
    structure = str(model)
    with pytest.warns(NoEffectWarning, match="GyroDropout changed no module"):
        apply_gyro_dropout(model, 10, 3, p=0.5, sigma=4, tau=2)
    assert str(model) == structure


def test_stock_models_and_where_it_does_not_apply() -> None:
    tv = pytest.importorskip("torchvision")
    timm = pytest.importorskip("timm")
    model = tv.models.mobilenet_v2(num_classes=10)  # Dropout(0.2) before its classifier
    assert apply_gyro_dropout(model, 100, 10, 0.5, 256, 16).count == 1
    assert model.train()(torch.rand(2, 3, 32, 32)).shape == (2, 10)
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=10, img_size=32, patch_size=8)
    with pytest.warns(NoEffectWarning):  # 50 nn.Dropout(0.0) placeholders, none of which drops
        apply_gyro_dropout(vit, 100, 10, 0.5, 256, 16)
    with pytest.warns(NoEffectWarning):  # ResNets have no dropout layer
        apply_gyro_dropout(tv.models.resnet18(), 100, 10, 0.5, 256, 16)


@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf:UserWarning")
def test_export_paths_channels_last_and_bf16() -> None:
    """FX and torch.export trace the eval model (the identity here); torch.compile matches eager in eval and in
    training (dynamo breaks the graph at the draws from an explicit generator, with torch's non-leaf warning)."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(144, 8), nn.Dropout(0.5), nn.Linear(8, 2))
    apply_gyro_dropout(model, 10, 2, 0.5, sigma=4, tau=2, generator=torch.Generator().manual_seed(0))
    x = torch.rand(4, 3, 8, 8).to(memory_format=torch.channels_last)
    eager = model.eval()(x)
    torch.testing.assert_close(torch.fx.symbolic_trace(model)(x), eager)
    torch.testing.assert_close(torch.export.export(model, (x,)).module()(x), eager)
    compiled = torch.compile(model)
    torch.testing.assert_close(compiled(x), eager, rtol=1e-4, atol=1e-4)
    model.train()
    generator_state, layer_state = model[3].generator.get_state(), copy.deepcopy(model[3].state_dict())
    trained = compiled(x)  # draws the pool and the picks
    model[3].generator.set_state(generator_state)
    model[3].load_state_dict(layer_state)  # no pool yet, step 0: eager draws the same
    torch.testing.assert_close(trained, model(x), rtol=1e-4, atol=1e-4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model(x).dtype == torch.bfloat16


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"p": 1.0}, ValueError, "`p`=1.0"),
        ({"p": -0.1}, ValueError, "`p`=-0.1"),
        ({"sigma": 0}, ValueError, "`sigma`=0"),
        ({"tau": 2.5}, TypeError, "`tau`=2.5"),
        ({"iters_per_epoch": 0}, ValueError, "`iters_per_epoch`=0"),
        ({"max_epoch": 0}, ValueError, "`max_epoch`=0"),
    ],
)
def test_bad_arguments_are_refused_naming_them(kwargs: dict, error: type, match: str) -> None:
    arguments = {"iters_per_epoch": 10, "max_epoch": 2, "p": 0.5, "sigma": 4, "tau": 2, **kwargs}
    model = _model()
    with pytest.raises(error, match=match):
        apply_gyro_dropout(model, **arguments)
    with pytest.raises(error, match=match):
        GyroDropoutLayer(**arguments)
    assert type(model[1]) is nn.Dropout


def test_used_alone_every_training_forward_is_a_step_as_in_composer() -> None:
    layer = _layer(iters=10, epochs=2, sigma=8, tau=2)
    for _ in range(3):
        layer(torch.ones(4, 6))
    assert layer.training_step == 3


def test_start_step_counts_optimizer_steps_and_microbatches_get_the_unsplit_batchs_masks() -> None:
    """A hand-written loop with 4 microbatches per step (and a second pass, as SAM's): the count follows start_step,
    and with batch_size and microbatch_offset every row gets the mask it gets in the unsplit batch."""
    whole, split = _layer(iters=10, epochs=2, sigma=8, tau=4), _layer(iters=10, epochs=2, sigma=8, tau=4)  # period 8
    x = torch.rand(8, 6)
    for step in range(10):
        expected = whole(x)  # one forward per step: Composer's count
        split.start_step(batch_size=8)
        for _ in range(2):  # two passes over the step's batch
            outputs = []
            for offset in range(0, 8, 2):
                split.microbatch_offset = offset
                outputs.append(split(x[offset : offset + 2]))
            assert torch.equal(torch.cat(outputs), expected), f"step {step}"
        assert split.training_step == whole.training_step == step + 1
    assert torch.equal(split.selected_masks, whole.selected_masks)  # picked at steps 0 and 8 in both


def test_start_step_without_a_batch_size_splits_each_input_and_keeps_the_steps_picks() -> None:
    layer = _layer(iters=4, epochs=1, sigma=8, tau=2)  # period 1: new picks every step
    layer.start_step()
    first = layer(torch.ones(2, 6))
    picks = layer.selected_masks
    second = layer(torch.ones(2, 6))
    assert torch.equal(first, second) and layer.selected_masks is picks and layer.training_step == 1
    mask = layer.preselect_masks[picks].float() * 2  # each microbatch of 2 rows is split in tau=2 blocks on its own
    assert torch.equal(first, mask)
    layer.start_step()
    layer(torch.ones(2, 6))
    assert layer.selected_masks is not picks and layer.training_step == 2
    with pytest.raises(ValueError, match="`batch_size`=0"):
        layer.start_step(0)


def test_picks_due_in_a_step_without_a_forward_are_drawn_after_a_resume() -> None:
    """A step that begins a period but never reaches the layer (a branch not taken) leaves its picks due: the state
    dict carries that, so a resumed loop draws them where the uninterrupted one does."""
    layer = _layer(iters=10, epochs=2, sigma=8, tau=2)  # period 4
    for _ in range(4):
        layer(torch.ones(4, 6))  # used alone: 4 steps, picks drawn at the first
    layer.start_step(4)  # step 5 begins a period; no forward reaches the layer
    fresh = _layer(iters=10, epochs=2, sigma=8, tau=2, seed=1)
    fresh.load_state_dict(layer.state_dict())
    fresh.generator.set_state(layer.generator.get_state())
    before = layer.selected_masks.clone()
    x = torch.rand(4, 6)
    for resumed in (fresh, layer):
        resumed.start_step(4)
    assert torch.equal(fresh(x), layer(x)) and fresh.training_step == layer.training_step == 6
    assert torch.equal(fresh.selected_masks, layer.selected_masks) and not torch.equal(layer.selected_masks, before)
