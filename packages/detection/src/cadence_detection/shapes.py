"""A small detection data set this project makes: squares, circles and triangles on textured backgrounds.

`make_shapes_dataset` draws the images, writes them as PNG files with COCO-format annotations
(``<root>/<split>/annotations.json``, boxes ``[x, y, w, h]`` tight around each shape's pixels), and
`ShapesDetection` reads them back through ``torchvision.datasets.CocoDetection`` (pycocotools' ``COCO``
and Pillow): the loading code of a real COCO data set, so what tests and the harness train on has
made the round trip through files. Category ids are 1 (square), 2 (circle), 3 (triangle).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cadence_detection.targets import pad_targets

__all__ = [
    "CATEGORIES",
    "NUM_CLASSES",
    "ShapesDetection",
    "collate_detection",
    "load_split_tensors",
    "make_shapes_dataset",
]

CATEGORIES = ({"id": 1, "name": "square"}, {"id": 2, "name": "circle"}, {"id": 3, "name": "triangle"})
NUM_CLASSES = 4  # labels are the category ids 1-3; 0 stays free (Faster R-CNN's background)
FORMAT = 1


def _texture(rng: np.random.Generator, size: int) -> np.ndarray:
    """A background of random colour gratings plus pixel noise, uint8 (size, size, 3)."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    image = np.zeros((size, size, 3), np.float32) + rng.uniform(60, 160, size=3)
    for _ in range(3):
        angle, period = rng.uniform(0, math.pi), rng.uniform(4, size / 2)
        wave = np.sin((xx * math.cos(angle) + yy * math.sin(angle)) * 2 * math.pi / period + rng.uniform(0, 6.3))
        image += wave[..., None] * rng.uniform(-30, 30, size=3)
    image += rng.normal(0, 12, size=image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def _draw_shape(rng: np.random.Generator, size: int, category: int) -> tuple[np.ndarray, list[float]]:
    """A mask of one shape and its tight box ``[x, y, w, h]`` (the mask's pixels)."""
    from PIL import Image, ImageDraw

    extent = int(rng.integers(max(8, size // 8), max(9, size // 3)))
    x0, y0 = (int(v) for v in rng.integers(0, size - extent, size=2))
    mask = Image.new("L", (size, size), 0)
    draw = ImageDraw.Draw(mask)
    corners = [x0, y0, x0 + extent - 1, y0 + extent - 1]
    if category == 1:
        draw.rectangle(corners, fill=255)
    elif category == 2:
        draw.ellipse(corners, fill=255)
    else:
        draw.polygon([(x0 + extent / 2, y0), (x0, y0 + extent - 1), (x0 + extent - 1, y0 + extent - 1)], fill=255)
    pixels = np.asarray(mask) > 0
    rows, cols = np.flatnonzero(pixels.any(1)), np.flatnonzero(pixels.any(0))
    box = [float(cols[0]), float(rows[0]), float(cols[-1] + 1 - cols[0]), float(rows[-1] + 1 - rows[0])]
    return pixels, box


def _write_split(folder: Path, count: int, image_size: int, max_objects: int, seed: int) -> None:
    from PIL import Image

    (folder / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    images: list[dict[str, object]] = []  # COCO's records
    annotations: list[dict[str, object]] = []
    for image_id in range(1, count + 1):
        canvas = _texture(rng, image_size)
        for _ in range(int(rng.integers(1, max_objects + 1))):
            category = int(rng.integers(1, len(CATEGORIES) + 1))
            pixels, box = _draw_shape(rng, image_size, category)
            canvas[pixels] = np.where(rng.random(3) < 0.5, rng.integers(0, 60, 3), rng.integers(190, 256, 3)).astype(
                np.uint8
            )
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": image_id,
                    "category_id": category,
                    "bbox": box,
                    "area": box[2] * box[3],
                    "iscrowd": 0,
                }
            )
        name = f"{image_id:06d}.png"
        Image.fromarray(canvas).save(folder / "images" / name)
        images.append({"id": image_id, "file_name": name, "width": image_size, "height": image_size})
    coco = {"images": images, "annotations": annotations, "categories": list(CATEGORIES)}
    (folder / "annotations.json").write_text(json.dumps(coco))


def make_shapes_dataset(
    root: str | Path,
    *,
    num_train: int = 256,
    num_val: int = 64,
    image_size: int = 96,
    max_objects: int = 3,
    seed: int = 0,
) -> Path:
    """Write the data set under `root` (``train/`` and ``val/``) unless the same one is already there; returns `root`.

    Shapes later in an image are drawn over earlier ones; a box stays the whole shape's box (as COCO's boxes
    of partly hidden objects do).
    """
    for name, value, least in (("num_train", num_train, 1), ("num_val", num_val, 1), ("max_objects", max_objects, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name}={value!r} must be an int >= {least}")
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 32:
        raise ValueError(f"image_size={image_size!r} must be an int >= 32 (pixels)")
    root = Path(root)
    config = {"format": FORMAT, "num_train": num_train, "num_val": num_val, "image_size": image_size}
    config |= {"max_objects": max_objects, "seed": seed}
    stamp = root / "shapes.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == config:
        return root
    root.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)  # written last: a half-written set is never taken for a whole one
    _write_split(root / "train", num_train, image_size, max_objects, seed)
    _write_split(root / "val", num_val, image_size, max_objects, seed + 1_000_003)
    stamp.write_text(json.dumps(config))
    return root


class ShapesDetection(torch.utils.data.Dataset):
    """One split of a COCO-format data set on disk, read with ``torchvision.datasets.CocoDetection``.

    Items are ``(image, target)``: uint8 (3, H, W) and ``{"boxes": float (K, 4) xyxy, "labels": int64 (K,)}``.
    Works for any COCO folder laid out as ``<root>/<split>/images`` + ``<root>/<split>/annotations.json``.
    """

    def __init__(self, root: str | Path, split: str = "train"):
        from torchvision.datasets import CocoDetection

        folder = Path(root) / split
        if not (folder / "annotations.json").is_file():
            raise FileNotFoundError(
                f"{folder / 'annotations.json'} does not exist; write the data set first with "
                f"make_shapes_dataset({str(root)!r}), or pass the root that holds {split}/annotations.json"
            )
        with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress
            self.coco = CocoDetection(str(folder / "images"), str(folder / "annotations.json"))

    def __len__(self) -> int:
        return len(self.coco)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        image, annotations = self.coco[index]
        pixels = torch.from_numpy(np.array(image.convert("RGB"))).permute(2, 0, 1).contiguous()
        boxes = torch.tensor([a["bbox"] for a in annotations], dtype=torch.float32).reshape(-1, 4)
        boxes[:, 2:] += boxes[:, :2]  # COCO's [x, y, w, h] -> [x1, y1, x2, y2]
        labels = torch.tensor([a["category_id"] for a in annotations], dtype=torch.int64)
        return pixels, {"boxes": boxes, "labels": labels}


def collate_detection(samples: Sequence[tuple[torch.Tensor, dict[str, torch.Tensor]]]) -> tuple[Any, torch.Tensor]:
    """A DataLoader's ``collate_fn``: images stacked (a list when their sizes differ), targets padded (N, K_max, 5)
    with label -1 rows, so every image keeps its own number of boxes."""
    images = [image for image, _ in samples]
    same = all(image.shape == images[0].shape for image in images)
    return (torch.stack(images) if same else images), pad_targets([target for _, target in samples])


def load_split_tensors(root: str | Path, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A whole split as (uint8 images (N, 3, H, W), padded targets (N, K_max, 5)), read through `ShapesDetection`."""
    dataset = ShapesDetection(root, split)
    return collate_detection([dataset[index] for index in range(len(dataset))])
