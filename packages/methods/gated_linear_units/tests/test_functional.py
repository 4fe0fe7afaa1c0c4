"""The gated blocks against their formulas, and the surgery on HuggingFace BERT, RoBERTa and GPT-2 models."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F
from cadence_gated_linear_units import BERTGatedFFOutput, GPT2GatedMLP, apply_gated_linear_units
from torch import nn

from cadence.ops import NoEffectError, NoEffectWarning

transformers = pytest.importorskip("transformers")

ARCHITECTURES = ("bert", "roberta", "gpt2")


def make_model(arch: str) -> nn.Module:
    """A tiny model built from a config (nothing downloaded)."""
    torch.manual_seed(0)
    if arch == "gpt2":
        config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, bos_token_id=0, eos_token_id=0)
        return transformers.GPT2LMHeadModel(config)
    size = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37}
    if arch == "bert":
        return transformers.BertForSequenceClassification(transformers.BertConfig(vocab_size=100, **size))
    return transformers.RobertaForSequenceClassification(transformers.RobertaConfig(vocab_size=100, **size))


def inputs(batch: int = 2, length: int = 8, seed: int = 0) -> dict[str, torch.Tensor]:
    input_ids = torch.randint(3, 100, (batch, length), generator=torch.Generator().manual_seed(seed))
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}


def loss(model: nn.Module, seed: int = 0) -> torch.Tensor:
    batch = inputs(seed=seed)
    labels = batch["input_ids"] if isinstance(model, transformers.GPT2LMHeadModel) else torch.tensor([0, 1])
    return model(**batch, labels=labels).loss


# The blocks -----------------------------------------------------------------------------------
@pytest.mark.parametrize("biases", [(False, False), (True, True)])
def test_the_bert_block_is_layernorm_of_the_gated_projection_plus_the_residual(biases: tuple[bool, bool]) -> None:
    torch.manual_seed(0)
    block = BERTGatedFFOutput(8, 12, 0.1, nn.GELU(), 1e-6, *biases).eval()
    with torch.no_grad():
        block.layernorm.weight.uniform_(0.5, 1.5)
        block.layernorm.bias.uniform_(-0.5, 0.5)
    x, residual = torch.randn(3, 5, 8), torch.randn(3, 5, 8)
    g, ng, wo, ln = block.gated_layer, block.non_gated_layer, block.wo, block.layernorm
    assert (g.bias is not None, ng.bias is not None) == biases
    gate = x @ g.weight.T + (g.bias if g.bias is not None else 0)
    value = x @ ng.weight.T + (ng.bias if ng.bias is not None else 0)
    expected = F.layer_norm((F.gelu(gate) * value) @ wo.weight.T + wo.bias + residual, (8,), ln.weight, ln.bias, 1e-6)
    torch.testing.assert_close(block(x, residual), expected)


def test_the_gpt2_block_is_the_gated_projection_then_the_output_projection() -> None:
    torch.manual_seed(0)
    block = GPT2GatedMLP(8, 12, 0.1, torch.relu, gated_layer_bias=True).eval()
    x = torch.randn(3, 5, 8)
    g, ng, wo = block.gated_layer, block.non_gated_layer, block.wo
    expected = (torch.relu(x @ g.weight.T + g.bias) * (x @ ng.weight.T)) @ wo.weight.T + wo.bias
    torch.testing.assert_close(block(x), expected)


# The surgery -----------------------------------------------------------------------------------
def trainable(model: nn.Module) -> set[int]:
    return {id(p) for p in model.parameters() if p.requires_grad}


def in_optimizer(optimizer: torch.optim.Optimizer) -> set[int]:
    return {id(p) for group in optimizer.param_groups for p in group["params"]}


EXPECTED = {
    "bert": {"BertIntermediate -> Identity": 2, "BertOutput -> BERTGatedFFOutput": 2},
    "roberta": {"RobertaIntermediate -> Identity": 2, "RobertaOutput -> BERTGatedFFOutput": 2},
    "gpt2": {"GPT2MLP -> GPT2GatedMLP": 2},
}


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_feed_forward_block_is_gated_with_its_shapes_and_the_optimizer_follows(arch: str) -> None:
    model = make_model(arch)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss(model).backward()
    optimizer.step()
    before = model(**inputs()).logits.shape
    blocks = [m for m in model.modules() if type(m).__name__ in ("BertOutput", "RobertaOutput", "GPT2MLP")]
    projections = [block.c_proj if arch == "gpt2" else block.dense for block in blocks]  # kept by the surgery
    moments = {id(p): optimizer.state[p]["exp_avg"].clone() for proj in projections for p in proj.parameters()}
    report = apply_gated_linear_units(model, optimizer)
    assert {k.split("/")[1]: v for k, v in report.counts().items()} == EXPECTED[arch]
    kinds = {type(m).__name__ for m in model.modules()}
    assert not kinds & {"BertIntermediate", "BertOutput", "RobertaIntermediate", "RobertaOutput", "GPT2MLP"}
    assert model(**inputs()).logits.shape == before
    assert in_optimizer(optimizer) == trainable(model)
    kept = [p for p in model.parameters() if id(p) in moments]
    assert len(kept) == len(moments) == 4  # weight and bias of two output projections, still in the model
    assert all(torch.equal(optimizer.state[p]["exp_avg"], moments[id(p)]) for p in kept)  # their Adam moments too
    optimizer.zero_grad()
    loss(model, seed=1).backward()
    optimizer.step()
    gated = next(m for m in model.modules() if isinstance(m, (BERTGatedFFOutput, GPT2GatedMLP)))
    assert optimizer.state[gated.gated_layer.weight], "the new projections train"


@pytest.mark.parametrize("arch", ["bert", "gpt2"])
def test_the_activation_is_each_blocks_own_unless_given_and_biases_follow_the_flags(arch: str) -> None:
    model = make_model(arch)
    apply_gated_linear_units(model, None)
    gated = [m for m in model.modules() if isinstance(m, (BERTGatedFFOutput, GPT2GatedMLP))]
    assert {type(m.act).__name__ for m in gated} == {"GELUActivation" if arch == "bert" else "NewGELUActivation"}
    assert all(m.gated_layer.bias is None and m.non_gated_layer.bias is None for m in gated)
    model = make_model(arch)
    apply_gated_linear_units(model, None, act_fn=torch.relu, gated_layer_bias=True)
    gated = [m for m in model.modules() if isinstance(m, (BERTGatedFFOutput, GPT2GatedMLP))]
    assert all(m.act is torch.relu and m.gated_layer.bias is not None and m.non_gated_layer.bias is None for m in gated)


@pytest.mark.parametrize("arch", ["bert", "gpt2"])
def test_a_second_application_changes_nothing_and_other_models_are_left_alone(arch: str) -> None:
    model = make_model(arch)
    apply_gated_linear_units(model, None)
    structure, state = str(model), copy.deepcopy(model.state_dict())
    with pytest.warns(NoEffectWarning, match="GatedLinearUnits changed no module"):
        assert not apply_gated_linear_units(model, None)
    assert str(model) == structure
    assert all(torch.equal(value, state[key]) for key, value in model.state_dict().items())
    with pytest.warns(NoEffectWarning):
        apply_gated_linear_units(nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)), None)
    with pytest.raises(NoEffectError):
        apply_gated_linear_units(nn.Sequential(nn.Linear(4, 4)), None, strict=True)


@pytest.mark.parametrize("arch", ["bert", "gpt2"])
def test_a_model_in_eval_mode_stays_in_eval_mode(arch: str) -> None:
    model = make_model(arch).eval()  # Composer's new blocks start in training mode: dropout at evaluation
    apply_gated_linear_units(model, None)
    assert not any(m.training for m in model.modules())


def test_dtype_and_device_follow_the_model_and_autocast_runs_in_bfloat16() -> None:
    model = make_model("bert").to(torch.float64)
    apply_gated_linear_units(model, None)
    gated = model.bert.encoder.layer[0].output
    assert gated.gated_layer.weight.dtype == torch.float64 and gated.gated_layer.weight.device == torch.device("cpu")
    assert model(**inputs()).logits.dtype == torch.float64
    model = make_model("gpt2").eval()
    apply_gated_linear_units(model, None)
    with torch.no_grad():
        full = model(**inputs()).logits
        with torch.autocast("cpu", dtype=torch.bfloat16):
            half = model(**inputs()).logits
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.float(), full, rtol=0.05, atol=0.05)


@pytest.mark.parametrize("arch", ["bert", "gpt2"])
def test_torch_export_gives_the_eager_outputs(arch: str) -> None:
    """torch.fx.symbolic_trace cannot trace these HF models even unchanged; torch.export can, with GLU too."""
    model = make_model(arch).eval()
    apply_gated_linear_units(model, None)
    batch = {**inputs(), "use_cache": False} if arch == "gpt2" else inputs()
    with torch.no_grad():
        exported = torch.export.export(model, (), batch).module()
        torch.testing.assert_close(exported(**batch).logits, model(**batch).logits)


@pytest.mark.slow
def test_torch_compile_captures_one_graph_and_gives_the_eager_outputs() -> None:
    model = make_model("bert").eval()
    apply_gated_linear_units(model, None)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # inductor's notices about the missing CUDA runtime
        compiled = torch.compile(model, fullgraph=True)
        torch.testing.assert_close(compiled(**inputs()).logits, model(**inputs()).logits, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"act_fn": "gelu"}, "act_fn"),
        ({"act_fn": lambda a, b: a}, "act_fn"),
        ({"gated_layer_bias": "no"}, "gated_layer_bias"),
        ({"gated_layer_bias": 1}, "gated_layer_bias"),
        ({"non_gated_layer_bias": None}, "non_gated_layer_bias"),
    ],
)
def test_bad_arguments_are_refused_naming_them(kwargs: dict, name: str) -> None:
    from cadence_gated_linear_units import GatedLinearUnits

    with pytest.raises(ValueError, match=f"`{name}`"):
        GatedLinearUnits(**kwargs)
    with pytest.raises(ValueError, match=f"`{name}`"):
        apply_gated_linear_units(make_model("bert"), None, **kwargs)
