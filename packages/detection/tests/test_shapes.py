"""The shapes set: written as COCO files, read back through torchvision's CocoDetection, batched with its boxes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from cadence_detection import ShapesDetection, collate_detection, load_split_tensors, make_shapes_dataset


def test_the_files_are_coco_and_read_back_as_xyxy_boxes(shapes_root: Path) -> None:
    coco = json.loads((shapes_root / "train" / "annotations.json").read_text())
    assert {c["name"] for c in coco["categories"]} == {"square", "circle", "triangle"}
    assert len(coco["images"]) == 8 and all(
        (shapes_root / "train" / "images" / i["file_name"]).is_file() for i in coco["images"]
    )
    dataset = ShapesDetection(shapes_root, "train")
    image, target = dataset[0]
    assert image.dtype == torch.uint8 and image.shape == (3, 64, 64)
    first = [a for a in coco["annotations"] if a["image_id"] == coco["images"][0]["id"]]
    x, y, w, h = first[0]["bbox"]
    assert target["boxes"][0].tolist() == [x, y, x + w, y + h]
    assert target["labels"].tolist() == [a["category_id"] for a in first]


def test_a_box_is_tight_around_its_shape(tmp_path: Path) -> None:
    """With one object per image, the pixels just outside the box are background and the box's edges hold shape."""
    root = make_shapes_dataset(tmp_path, num_train=6, num_val=1, image_size=48, max_objects=1, seed=3)
    for image, target in ShapesDetection(root, "train"):
        x1, y1, x2, y2 = (int(v) for v in target["boxes"][0])
        inside = image[:, y1:y2, x1:x2]
        assert 4 <= x2 - x1 <= 48 and 4 <= y2 - y1 <= 48
        edges = [inside[:, 0, :], inside[:, -1, :], inside[:, :, 0], inside[:, :, -1]]
        colour = inside[:, (y2 - y1) // 2, (x2 - x1) // 2]  # squares, circles and triangles cover their centre
        for edge in edges:  # every side of a tight box touches the shape
            assert (edge == colour[:, None]).all(0).any()


def test_batches_keep_a_variable_number_of_boxes(shapes_root: Path) -> None:
    loader = DataLoader(ShapesDetection(shapes_root, "train"), batch_size=4, collate_fn=collate_detection)
    images, targets = next(iter(loader))
    counts = [(row[:, 0] >= 0).sum().item() for row in targets]
    assert images.shape == (4, 3, 64, 64) and targets.shape[0] == 4 and targets.shape[2] == 5
    expected = [len(ShapesDetection(shapes_root, "train")[i][1]["labels"]) for i in range(4)]
    assert counts == expected and max(counts) == targets.shape[1]
    all_images, all_targets = load_split_tensors(shapes_root, "val")
    assert all_images.shape == (4, 3, 64, 64) and all_targets.shape[0] == 4


def test_the_same_settings_reuse_the_files_and_bad_ones_are_refused(shapes_root: Path, tmp_path: Path) -> None:
    stamp = (shapes_root / "train" / "annotations.json").stat().st_mtime_ns
    make_shapes_dataset(shapes_root, num_train=8, num_val=4, image_size=64)
    assert (shapes_root / "train" / "annotations.json").stat().st_mtime_ns == stamp
    with pytest.raises(ValueError, match="image_size=16"):
        make_shapes_dataset(tmp_path, image_size=16)
    with pytest.raises(FileNotFoundError, match="make_shapes_dataset"):
        ShapesDetection(tmp_path / "nothing")
