"""Each model family trains 2 steps through the harness and logs to a real SQLite MLflow store."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from mlflow.tracking import MlflowClient

from cadence.registry import registry
from cadence_harness.running.run import execute
from cadence_harness.running.runspec import RunSpec

MODEL_AGNOSTIC_METHODS = ["gradient_clipping", "ema", "decoupled_weight_decay"]


def check_logged_run(tracking_uri: str, spec: RunSpec, run_id: str) -> None:
    client = MlflowClient(tracking_uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.info.run_name == spec.run_name
    params, tags, metrics = run.data.params, run.data.tags, run.data.metrics
    assert params["model"] == spec.recipe.model and params["data"] == spec.recipe.data
    assert params["methods"] == spec.arm_name and params["seed"] == str(spec.seed)
    assert params["batch_size"] == str(spec.recipe.batch_size) and params["precision"] == "fp32"
    for key in ("device_name", "versions.torch", "versions.cadence", "git_sha", "data_source"):
        assert params[key], key
    for name, kwargs in spec.method_kwargs():
        assert params[f"method.{name}"].startswith(registry().method(name).algorithm.__name__)
        for key, value in kwargs.items():
            assert params[f"method.{name}.{key}"] == str(value)
    assert tags["cadence.config_hash"] == spec.config_hash and tags["cadence.arm"] == spec.arm_name
    losses = client.get_metric_history(run_id, "loss/train/total")
    assert [m.step for m in losses] == [1, 2]
    assert 0.0 <= metrics["metrics/eval/MulticlassAccuracy"] <= 1.0
    assert metrics["final/accuracy"] == metrics["metrics/eval/MulticlassAccuracy"]
    assert metrics["final/train_s"] > 0 and metrics["final/samples_per_s"] > 0
    assert metrics["final/wall_s"] >= metrics["final/train_s"] + metrics["final/eval_s"] * 0.99
    assert metrics["final/peak_memory_mb"] > 0
    assert metrics["final/reached_target"] in (0.0, 1.0)
    assert "config.json" in [a.path for a in client.list_artifacts(run_id)]


def test_torchvision_family(tracking_uri: str, tiny_recipe: Any, image_methods: list[str]) -> None:
    spec = RunSpec(tiny_recipe(methods={m: {} for m in image_methods}), tuple(image_methods), seed=0)
    result = execute(spec, tracking_uri=tracking_uri, progress_bar=False)
    check_logged_run(tracking_uri, spec, result.run_id)


def test_timm_family(tracking_uri: str, tiny_recipe: Any, image_methods: list[str]) -> None:
    recipe = tiny_recipe(model="timm/test_resnet", methods={m: {} for m in image_methods}, augment="flip_crop")
    spec = RunSpec(recipe, tuple(image_methods), seed=1)
    result = execute(spec, tracking_uri=tracking_uri, progress_bar=False)
    check_logged_run(tracking_uri, spec, result.run_id)


@pytest.mark.parametrize("model", ["hf/bert-tiny", "hf/gpt2-tiny"])
def test_huggingface_family(tracking_uri: str, tiny_recipe: Any, model: str) -> None:
    methods = [m for m in MODEL_AGNOSTIC_METHODS if m in registry().methods][:2]
    recipe = tiny_recipe(model=model, data="synthetic_text", max_length=16, methods={m: {} for m in methods})
    spec = RunSpec(recipe, tuple(methods), seed=0)
    result = execute(spec, tracking_uri=tracking_uri, progress_bar=False)
    check_logged_run(tracking_uri, spec, result.run_id)
    run = MlflowClient(tracking_uri).get_run(result.run_id)
    assert run.data.metrics["final/tokens_per_s"] > 0
    assert len(run.data.params["tokenizer_sha256"]) == 16  # which token ids it saw (trained per machine)
    assert "boot_id" in run.data.params and "host_cpu" not in run.data.params  # on a CPU the device is the host


def test_a_failing_method_marks_the_run_failed(
    tracking_uri: str, tiny_recipe: Any, explode_plugin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CADENCE_TEST_EXPLODE", "1")
    spec = RunSpec(tiny_recipe(methods={"explode": {"on_seed": 0, "how": "raise"}}), ("explode",), seed=0)
    with pytest.raises(Exception, match="exploded on purpose"):
        execute(spec, tracking_uri=tracking_uri, progress_bar=False)
    client = MlflowClient(tracking_uri)
    (run,) = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert run.info.status == "FAILED"
    assert "exploded on purpose" in run.data.tags["cadence.error"]
    assert run.data.tags["cadence.failure"] == "MethodError"


def test_a_causal_language_model_reports_perplexity_and_next_token_accuracy(
    tracking_uri: str, tiny_recipe: Any
) -> None:
    methods = {"alibi": {"max_sequence_length": 16}, "seq_length_warmup": {"max_seq_length": 16}}
    methods = {name: kwargs for name, kwargs in methods.items() if name in registry().methods}
    recipe = tiny_recipe(
        model="hf/gpt2-tiny", data="synthetic_text", task="causal_lm", max_length=16, subset=32, methods=methods
    )
    spec = RunSpec(recipe, tuple(methods), seed=0)
    result = execute(spec, tracking_uri=tracking_uri, progress_bar=False)
    check_logged_run(tracking_uri, spec, result.run_id)
    metrics = MlflowClient(tracking_uri).get_run(result.run_id).data.metrics
    # perplexity is exp(cross-entropy) of the same evaluation, and the record keeps it as the final one
    assert metrics["metrics/eval/LanguagePerplexity"] == pytest.approx(
        math.exp(metrics["metrics/eval/LanguageCrossEntropy"]), rel=1e-5
    )
    assert metrics["final/perplexity"] == metrics["metrics/eval/LanguagePerplexity"] > 1.0
    assert metrics["final/tokens_per_s"] > 0


def test_language_model_blocks_are_the_texts_joined_by_end_of_text() -> None:
    from cadence_harness.running.models import pack_blocks
    from cadence_harness.running.text_tokenizers import build_tokenizer

    texts = ["a good film", "a bad film", "good good", "bad"] * 4
    tokenizer = build_tokenizer("hf/gpt2-tiny", texts, vocab_size=300)
    blocks = pack_blocks(tokenizer, texts, block_size=8)
    stream = [t for row in tokenizer(texts)["input_ids"] for t in (*row, tokenizer.eos_token_id)]
    assert blocks["input_ids"].shape == (len(stream) // 8, 8)
    assert blocks["input_ids"].flatten().tolist() == stream[: blocks["input_ids"].numel()]
    assert torch.equal(blocks["labels"], blocks["input_ids"]) and bool(blocks["attention_mask"].all())
    with pytest.raises(ValueError, match="`max_length` = 4096: the text holds only"):
        pack_blocks(tokenizer, texts, block_size=4096)


def test_a_compiled_run_records_what_it_compiled(
    tracking_uri: str, tiny_recipe: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A timing of "compiled" code is only that if graphs were compiled and used: the record says so. (Dynamo's
    eager backend traces and guards as Inductor does, without generating kernels, so this stays fast.)"""
    from cadence_harness.running import run

    monkeypatch.setattr(run, "compile_config", lambda mode: None if mode is False else {"backend": "eager"})
    spec = RunSpec(tiny_recipe(compile=True), (), seed=0)
    result = execute(spec, tracking_uri=tracking_uri, progress_bar=False)
    metrics = MlflowClient(tracking_uri).get_run(result.run_id).data.metrics
    assert metrics["final/compile_disabled"] == 0.0 and metrics["final/graph_breaks"] == 0.0
    assert metrics["final/compiled_graphs"] >= 0.0  # 0 when an earlier test of this process compiled the same code
    for name in ("compiled_graphs", "graph_breaks", "cudagraph_skips", "compile_disabled"):
        assert result.metrics[f"final/{name}"] == metrics[f"final/{name}"]
    eager = execute(RunSpec(tiny_recipe(), (), seed=0), tracking_uri=tracking_uri, progress_bar=False)
    assert "final/compiled_graphs" not in eager.metrics
