"""cadence-detection through the harness: detector names, the shapes data as tensors, a whole `cadence-bench run`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cadence_detection import DetectionModel
from cadence_harness.running.data import load_detection_shapes
from cadence_harness.running.models import build_image_model, check_model


def test_detectors_train_on_boxes_only_and_boxes_only_on_detectors() -> None:
    check_model("tv/fcos_resnet50_fpn", "detection_shapes")
    check_model("cadence/retinanet_small", "detection_shapes")
    with pytest.raises(ValueError, match=r"'tv/fcos_resnet50_fpn' is a detector; train it on detection data"):
        check_model("tv/fcos_resnet50_fpn", "cifar10")
    with pytest.raises(ValueError, match=r"must be a detector; detectors: .*tv/retinanet_resnet50_fpn"):
        check_model("tv/resnet20", "detection_shapes")


def test_the_shapes_set_arrives_as_images_and_padded_boxes(tmp_path: Path) -> None:
    data = load_detection_shapes(tmp_path)
    assert data.kind == "detection" and data.num_classes == 4
    assert data.train_x.shape == (256, 3, 96, 96) and data.train_x.dtype == torch.uint8
    assert data.train_y.ndim == 3 and data.train_y.shape[0] == 256 and data.train_y.shape[2] == 5
    labels = data.train_y[..., 0]
    assert set(labels.unique().tolist()) <= {-1.0, 1.0, 2.0, 3.0} and (labels[:, 0] >= 1).all()  # >= 1 box each
    mean, std = data.channel_stats()
    model = build_image_model(
        "cadence/fcos_small", num_classes=4, in_channels=3, mean=mean, std=std, init_images=data.train_x
    )
    assert isinstance(model, DetectionModel)
    assert model.module.transform.min_size == (96,) and model.module.transform.image_mean == list(mean)


@pytest.mark.slow
def test_cadence_bench_run_trains_evaluates_map_and_logs_to_mlflow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import mlflow

    from cadence_harness.cli import main

    monkeypatch.setenv("CADENCE_CACHE", str(tmp_path / "cache"))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    argv = ["run", "detection_shapes", "--model", "cadence/retinanet_small", "--duration", "2ba", "--seeds", "1"]
    argv += ["--set", "subset=16", "--set", "eval_subset=8", "--set", "batch_size=4", "--tracking-uri", uri]
    assert main(argv) == 0
    assert "baseline-s0: mAP@[.5:.95] 0." in capsys.readouterr().out  # the run's line reads mAP, not accuracy
    client = mlflow.MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("detection_shapes").experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    metrics = runs[0].data.metrics
    assert 0.0 <= metrics["metrics/eval/MeanAveragePrecision"] <= 1.0
    assert runs[0].data.params["model"] == "cadence/retinanet_small"
    assert metrics["final/accuracy"] == metrics["metrics/eval/MeanAveragePrecision"]  # mAP is the run's quality
    # a method a detector refuses is refused before any MLflow run exists, in one line, exit 2
    assert main([*argv, "--methods", "mixup"]) == 2
    assert len(client.search_runs([runs[0].info.experiment_id])) == 1
