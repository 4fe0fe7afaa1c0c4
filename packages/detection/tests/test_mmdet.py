"""Route (b) of issue 30: mmcv's operators from torchvision.ops, and YOLOX from MMDetection's config under the Trainer.

The YOLOX tests need ``pip install -e './packages/detection[mmdet]'`` (mmdet 3.3, mmcv-lite, mmengine) and are
skipped without it; the operator tests always run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader
from torchvision.ops import nms

from cadence import Trainer
from cadence.testing import assert_same_tensors
from cadence_detection import ShapesDetection, collate_detection
from cadence_detection.mmcv_ops import IMPLEMENTED, TorchvisionExtension

# mmdet 3.3, mmcv and mmengine warn about torch.cuda.amp.autocast, torch.meshgrid and their own moves: not ours
pytestmark = [
    pytest.mark.filterwarnings("ignore:.*torch.cuda.amp.autocast.*:FutureWarning"),
    pytest.mark.filterwarnings("ignore:.*torch.meshgrid.*:UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::ImportWarning"),  # mmcv's own notes on where its classes moved
]


def test_the_nms_stand_in_keeps_what_torchvision_keeps_and_honours_mmcvs_pixel_offset() -> None:
    generator = torch.Generator().manual_seed(0)
    corners = torch.rand(50, 2, generator=generator) * 50
    boxes = torch.cat([corners, corners + 5 + torch.rand(50, 2, generator=generator) * 20], dim=1)
    scores = torch.rand(50, generator=generator)
    extension = TorchvisionExtension()
    assert torch.equal(extension.nms(boxes, scores, iou_threshold=0.5, offset=0), nms(boxes, scores, 0.5))
    # offset 1: boxes [0, 0, 1, 1] and [1, 0, 2, 1] are 2 x 2 pixels overlapping in one column: IoU 2 / 6
    pair, two = torch.tensor([[0.0, 0, 1, 1], [1.0, 0, 2, 1]]), torch.tensor([0.9, 0.8])
    assert extension.nms(pair, two, iou_threshold=0.3, offset=1).tolist() == [0]
    assert extension.nms(pair, two, iou_threshold=0.3, offset=0).tolist() == [0, 1]  # they only touch


def test_an_operator_without_a_stand_in_exists_by_name_and_refuses_when_called() -> None:
    extension = TorchvisionExtension()
    assert hasattr(extension, "roi_align_forward") and "nms" in IMPLEMENTED
    with pytest.raises(NotImplementedError, match="'roi_align_forward' has no torchvision-backed version"):
        extension.roi_align_forward(torch.zeros(1))


def _yolox() -> torch.nn.Module:
    pytest.importorskip("mmdet", reason="needs pip install -e './packages/detection[mmdet]'")
    from cadence_detection.mmdet import yolox

    torch.manual_seed(0)
    return yolox("tiny", num_classes=3, label_offset=1)


def _trainer(model: torch.nn.Module, root: Path, **kwargs) -> Trainer:
    train = DataLoader(ShapesDetection(root, "train"), batch_size=2, shuffle=True, collate_fn=collate_detection)
    return Trainer(
        model=model,
        train_dataloader=train,
        max_duration="4ba",
        optimizers=torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
        algorithms=model.training_procedures(),
        device="cpu",
        progress_bar=False,
        seed=5,
        **kwargs,
    )


@pytest.mark.slow
def test_yolox_tiny_from_mmdetections_config_trains_and_evaluates_coco_map(shapes_root: Path) -> None:
    model = _yolox()
    batch = collate_detection([ShapesDetection(shapes_root, "train")[i] for i in range(2)])
    losses = model.loss(model.train()(batch), batch)
    assert set(losses) == {"loss_cls", "loss_bbox", "loss_obj"} and all(torch.isfinite(v) for v in losses.values())
    val = DataLoader(ShapesDetection(shapes_root, "val"), batch_size=4, collate_fn=collate_detection)
    trainer = _trainer(model, shapes_root, eval_dataloader=val, eval_interval="4ba")
    trainer.fit()
    assert 0.0 <= float(trainer.state.eval_metrics["MeanAveragePrecision"].compute()) <= 1.0
    detections = model.eval_forward(batch)
    assert len(detections) == 2 and all(((d["labels"] >= 1) & (d["labels"] <= 3)).all() for d in detections)
    trainer.close()


@pytest.mark.slow
def test_yolox_resumes_bitwise(shapes_root: Path, tmp_path: Path) -> None:
    whole = _trainer(_yolox(), shapes_root, save_folder=tmp_path, save_interval="2ba")
    whole.fit()
    resumed = _trainer(_yolox(), shapes_root, load_path=tmp_path / "ep0-ba2.pt")
    resumed.fit()
    assert_same_tensors(whole.state.model.state_dict(), resumed.state.model.state_dict(), "model")
    whole.close()
    resumed.close()
