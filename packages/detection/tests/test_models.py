"""torchvision detectors under cadence's Trainer: training steps, COCO evaluation, bitwise resume, methods."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from cadence import Trainer
from cadence.testing import assert_same_tensors
from cadence_detection import (
    NUM_CLASSES,
    SMALL_KINDS,
    DetectionModel,
    ShapesDetection,
    collate_detection,
    small_detector,
    torchvision_detector,
)


def _trainer(model: DetectionModel, root: Path, duration: str = "2ba", evaluate: bool = True, **kwargs: Any) -> Trainer:
    train = DataLoader(ShapesDetection(root, "train"), batch_size=2, shuffle=True, collate_fn=collate_detection)
    val = DataLoader(ShapesDetection(root, "val"), batch_size=4, collate_fn=collate_detection) if evaluate else None
    kwargs.setdefault("algorithms", model.training_procedures())
    kwargs.setdefault("device", "cpu")
    return Trainer(
        model=model,
        train_dataloader=train,
        eval_dataloader=val,
        max_duration=duration,
        optimizers=torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
        progress_bar=False,
        seed=7,
        **kwargs,
    )


def _trains_and_evaluates(model: DetectionModel, root: Path) -> None:
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainer = _trainer(model, root, eval_interval="2ba")
    trainer.fit()
    changed = [name for name, p in model.named_parameters() if not torch.equal(before[name], p)]
    assert len(changed) > len(before) // 2  # the step reached backbone, neck and heads
    losses = (
        [v for k, v in trainer.state.loss.items()] if isinstance(trainer.state.loss, dict) else [trainer.state.loss]
    )
    assert all(torch.isfinite(torch.as_tensor(v)).all() for v in losses)
    value = float(trainer.state.eval_metrics["MeanAveragePrecision"].compute())
    assert 0.0 <= value <= 1.0
    trainer.close()


@pytest.mark.parametrize("kind", SMALL_KINDS)
def test_a_small_detector_trains_two_steps_and_evaluates_coco_map(kind: str, shapes_root: Path) -> None:
    torch.manual_seed(0)
    _trains_and_evaluates(small_detector(kind, NUM_CLASSES, min_size=64), shapes_root)


@pytest.mark.slow  # 20-42 s each on a busy 2-core VM (the MobileNet one 1.5-27 s)
@pytest.mark.parametrize("name", ["fcos_resnet50_fpn", "retinanet_resnet50_fpn", "fasterrcnn_mobilenet_v3_large_fpn"])
def test_a_torchvision_detector_trains_two_steps_and_evaluates(name: str, shapes_root: Path) -> None:
    torch.manual_seed(0)
    _trains_and_evaluates(torchvision_detector(name, NUM_CLASSES, min_size=64, max_size=64), shapes_root)


def test_the_loss_is_the_sum_of_the_detectors_loss_dict(shapes_root: Path) -> None:
    from cadence.models import total_loss

    torch.manual_seed(0)
    model = small_detector("retinanet", NUM_CLASSES, min_size=64).train()
    batch = collate_detection([ShapesDetection(shapes_root, "train")[i] for i in range(2)])
    losses = model.loss(model(batch), batch)
    assert set(losses) == {"classification", "bbox_regression"}
    assert torch.equal(total_loss(losses), losses["classification"] + losses["bbox_regression"])
    detections = model.eval().eval_forward(batch)
    assert len(detections) == 2 and {"boxes", "scores", "labels"} <= set(detections[0])


def test_resuming_from_a_checkpoint_is_bitwise_the_uninterrupted_run(shapes_root: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)
    whole = _trainer(
        small_detector("retinanet", NUM_CLASSES, min_size=64),
        shapes_root,
        "4ba",
        evaluate=False,
        save_folder=tmp_path,
        save_interval="2ba",
    )
    whole.fit()
    torch.manual_seed(1)  # another initialisation: the checkpoint must bring back every weight
    resumed = _trainer(
        small_detector("retinanet", NUM_CLASSES, min_size=64),
        shapes_root,
        "4ba",
        evaluate=False,
        load_path=tmp_path / "ep0-ba2.pt",
    )
    resumed.fit()
    assert resumed.state.timestamp.batch.value == 4
    assert_same_tensors(whole.state.model.state_dict(), resumed.state.model.state_dict(), "model")
    assert_same_tensors(whole.state.optimizers[0].state_dict(), resumed.state.optimizers[0].state_dict(), "optimizer")
    whole.close()
    resumed.close()


def test_channels_last_ema_clipping_and_blurpool_train_a_detector(shapes_root: Path) -> None:
    from cadence.registry import registry

    methods = {
        "channels_last": {},
        "ema": {},
        "gradient_clipping": {"clipping_type": "norm", "clipping_threshold": 1.0},
        "blurpool": {},
    }
    missing = sorted(set(methods) - set(registry().methods))
    if missing:
        pytest.skip(f"needs the method packages {missing}")
    algorithms = [registry().method(name).algorithm(**kwargs) for name, kwargs in methods.items()]
    torch.manual_seed(0)
    model = small_detector("fcos", NUM_CLASSES, min_size=64)
    trainer = _trainer(model, shapes_root, algorithms=[*algorithms, *model.training_procedures()], eval_interval="2ba")
    trainer.fit()
    kinds = {type(m).__name__ for m in model.modules()}
    assert {"BlurConv2d", "BlurMaxPool2d"} & kinds
    assert 0.0 <= float(trainer.state.eval_metrics["MeanAveragePrecision"].compute()) <= 1.0
    trainer.close()


@pytest.mark.parametrize("method", ["mixup", "progressive_resizing", "randaugment", "label_smoothing"])
def test_a_method_that_would_leave_the_boxes_wrong_is_refused_before_training(method: str, shapes_root: Path) -> None:
    from cadence.registry import registry

    if method not in registry().methods:
        pytest.skip(f"needs cadence-{method.replace('_', '-')}")
    algorithm = registry().method(method).algorithm()
    model = small_detector("retinanet", NUM_CLASSES, min_size=64)
    with pytest.raises(
        ValueError, match=rf"{algorithm.name} does not apply to detection: .*; leave {algorithm.name} out"
    ):
        _trainer(model, shapes_root, algorithms=[algorithm, *model.training_procedures()])


def test_unknown_names_and_downloads_are_refused() -> None:
    with pytest.raises(ValueError, match="did you mean 'fcos_resnet50_fpn'"):
        torchvision_detector("fcos_resnet50", NUM_CLASSES)
    with pytest.raises(ValueError, match="weights='DEFAULT'"):
        torchvision_detector("fcos_resnet50_fpn", NUM_CLASSES, weights="DEFAULT")
    with pytest.raises(ValueError, match="kind='yolo'"):
        small_detector("yolo", NUM_CLASSES)
    with pytest.raises(ValueError, match="num_classes=1"):
        small_detector("fcos", 1)


@pytest.mark.gpu
def test_a_small_detector_trains_and_evaluates_on_a_gpu(shapes_root: Path) -> None:
    """Padded targets reach the GPU with the images (the Trainer moves tensors, never lists of dicts)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    torch.manual_seed(0)
    model = small_detector("fcos", NUM_CLASSES, min_size=64)
    trainer = _trainer(model, shapes_root, eval_interval="2ba", device="gpu")
    trainer.fit()
    assert next(model.parameters()).is_cuda
    assert 0.0 <= float(trainer.state.eval_metrics["MeanAveragePrecision"].compute()) <= 1.0
    trainer.close()


def test_check_methods_names_the_first_method_that_cannot_train_a_detector() -> None:
    from cadence.algorithm import NotApplicableError
    from cadence.registry import registry
    from cadence_detection import check_methods

    if not {"ema", "cutmix"} <= set(registry().methods):
        pytest.skip("needs cadence-ema and cadence-cutmix")
    ema, cutmix = registry().method("ema").algorithm(), registry().method("cutmix").algorithm()
    check_methods([ema])
    with pytest.raises(NotApplicableError, match="CutMix does not apply to detection: it pastes a patch"):
        check_methods([ema, cutmix])
