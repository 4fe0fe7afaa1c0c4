"""Datasets by name, kept as whole tensors: images as uint8 (N, C, H, W), text as strings.

Images stay unnormalised all the way to the model (the model normalises them itself), so
data-side methods such as RandAugment, AugMix or CutOut see real pixel values.

Files are looked up, in order, in: ``$CADENCE_DATA``, the repository's ``../shared/data``,
``/usr/share/datasets/fashion-mnist`` (Debian's ``dataset-fashion-mnist``), and finally
torchvision's download when it is allowed (``--download``). A ``--data-dir`` given is the only
folder searched: data missing there is refused, never taken from elsewhere without a word.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch

from cadence_harness.running.recipe_checks import DATASETS, RecipeError, check_dataset

__all__ = [
    "DETECTION_DATASETS",
    "DataNotFoundError",
    "ImageData",
    "TextData",
    "check_data_dir",
    "decode_jpegs",
    "load_dataset",
    "replace_when_complete",
    "search_dirs",
]

REPO_ROOT = Path(__file__).resolve().parents[4]
DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
HOW_TO_GET = {
    "cifar10": "copy cifar10_jpeg.npz (see shared/data/README.md) into one of these folders, or pass --download",
    "fashion_mnist": "`apt-get install dataset-fashion-mnist` (after `apt-get update`), or pass --download",
    "sst2": "copy sst2_train.tsv.gz and sst2_dev.tsv.gz (see shared/data/README.md) into one of these folders",
}


DETECTION_DATASETS = tuple(name for name, kind in DATASETS.items() if kind == "detection")  # boxes: cadence-detection


class DataNotFoundError(FileNotFoundError):
    """A dataset's files are in none of the folders searched; the message lists them."""


@dataclass
class ImageData:
    """uint8 images (N, C, H, W) and int64 labels; `source` says where they came from."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    source: str
    kind: str = "image"

    @property
    def channels(self) -> int:
        return int(self.train_x.shape[1])

    def channel_stats(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Per-channel mean and std of the training images in [0, 1] (what the model normalises with)."""
        x = self.train_x.float().div_(255)
        return tuple(x.mean(dim=(0, 2, 3)).tolist()), tuple(x.std(dim=(0, 2, 3)).clamp(min=1e-3).tolist())


@dataclass
class TextData:
    train_text: list[str]
    train_y: torch.Tensor
    test_text: list[str]
    test_y: torch.Tensor
    num_classes: int
    source: str
    kind: str = "text"


# Where files are ------------------------------------------------------------------------
def check_data_dir(data_dir: str | Path | None) -> None:
    """A `--data-dir` that is not a folder is refused (it would be skipped, and the data taken from elsewhere)."""
    if data_dir is not None and not Path(data_dir).is_dir():
        problem = "is a file, not a folder" if Path(data_dir).exists() else "does not exist"
        raise RecipeError(
            f"`--data-dir` {str(data_dir)!r} {problem}; pass the folder that holds the dataset files, or leave "
            "--data-dir out to search $CADENCE_DATA and ../shared/data"
        )


def search_dirs(data_dir: str | Path | None = None) -> list[tuple[str, Path | None]]:
    """(label, folder) pairs in lookup order; a folder is None when its setting is absent. A `data_dir` given
    is searched alone: the user named where the data is."""
    if data_dir:
        alone = "--data-dir (searched alone; leave it out to search $CADENCE_DATA and ../shared/data)"
        return [(alone, Path(data_dir))]
    env = os.environ.get("CADENCE_DATA")
    return [
        ("$CADENCE_DATA", Path(env) if env else None),
        ("the repository's ../shared/data", REPO_ROOT.parent / "shared" / "data"),
        ("Debian package dataset-fashion-mnist", DEBIAN_FASHION_MNIST),
    ]


def find_dataset_files(dataset: str, names: list[str], data_dir: str | Path | None) -> Path:
    """The first folder (or its ``<dataset>`` subfolder) holding all of `names`."""
    looked: list[str] = []
    for label, folder in search_dirs(data_dir):
        if folder is None:
            looked.append(f"  - {label}: not set")
            continue
        for candidate in (folder, folder / dataset, folder / dataset.replace("_", "-")):
            if all((candidate / name).is_file() for name in names):
                return candidate
        looked.append(f"  - {label}: {folder}")
    raise DataNotFoundError(
        f"dataset {dataset!r} not found: looked for {', '.join(names)} in\n"
        + "\n".join(looked)
        + f"\nTo get it: {HOW_TO_GET.get(dataset, 'see shared/data/README.md')}."
    )


def cache_dir() -> Path:
    path = Path(os.environ.get("CADENCE_CACHE", Path.home() / ".cache" / "cadence"))
    path.mkdir(parents=True, exist_ok=True)
    return path


# Loaders per dataset ------------------------------------------------------------------
# The decoded CIFAR-10 cache: version 1 was torch.save((images, labels)) of Pillow decodes; version 2 keeps the
# images alone as a raw .npy (labels are read from the archive each time), decoded by torchvision to the same pixels.
CACHE_FORMAT = 2
# torchvision 0.29 deprecates its image decoders in favour of TorchCodec; they still decode exactly as Pillow does.
_DECODE_DEPRECATION = "The image decoding and encoding capabilities of TorchVision are deprecated"


def decode_jpegs(blob: np.ndarray, offsets: np.ndarray, count: int) -> torch.Tensor:
    """The first `count` JPEGs of a concatenated blob as uint8 (N, 3, H, W): torchvision's libjpeg-turbo decoder on
    the whole list (about 4x faster than Pillow one by one, and pixel for pixel the same)."""
    from torchvision.io import ImageReadMode, decode_jpeg

    jpegs = torch.from_numpy(blob[offsets[0] : offsets[count]]).split(np.diff(offsets[: count + 1]).tolist())
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_DECODE_DEPRECATION, category=DeprecationWarning)
        return torch.stack(decode_jpeg(list(jpegs), mode=ImageReadMode.RGB))


@contextlib.contextmanager
def replace_when_complete(target: Path) -> Iterator[BinaryIO]:
    """A binary file to write `target`'s contents to. It is a temporary file of this writer's own beside `target`
    (writers at once never share one); when the block ends it is flushed, synced to disk and renamed over `target`
    in one step, so a reader finds no file or a whole one. On an error it is removed and `target` is untouched."""
    descriptor, name = tempfile.mkstemp(dir=target.parent, prefix=f"{target.name}.", suffix=".tmp")
    temporary = Path(name)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _cached_images(path: Path, count: int) -> torch.Tensor | None:
    """The cached images if `path` holds all `count` of them as uint8 (N, 3, H, W); None when there is no cache.
    A file that is not that (truncated, damaged, another layout) is never used: it is reported and decoded anew.
    A whole file is all a reader can find there (see `replace_when_complete`); there is no checksum of the pixels."""
    try:
        images = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        return None
    except Exception as error:  # a truncated or damaged .npy fails in many ways (ValueError, EOFError, a bad header)
        problem = f"cannot be read ({error})"
    else:
        if images.dtype == np.uint8 and images.ndim == 4 and images.shape[:2] == (count, 3):
            return torch.from_numpy(images)
        problem = f"holds {images.dtype} {images.shape}, not uint8 ({count}, 3, H, W)"
    warnings.warn(f"the data cache {path} {problem}; decoding the JPEGs again and replacing it", stacklevel=3)
    return None


def _cifar10_split(path: Path, split: str, count: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The first `count` images of a split and their labels. The images are decoded once into a cache file named by
    the archive (path, size, modification time), the split, the count and the cache format; later calls, and other
    processes, read that file. Processes that find no cache all decode, and each renames its own whole file in."""
    with np.load(path) as archive:
        labels = archive[f"y_{split}"]
        if count is not None and count < 1:
            raise ValueError(f"{split} subset = {count}: keep at least 1 image, or None for the whole split")
        count = len(labels) if count is None else min(count, len(labels))
        stat = path.stat()
        identity = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}:{split}:{count}:v{CACHE_FORMAT}"
        cached = cache_dir() / f"cifar10-{split}-{count}-{hashlib.sha1(identity.encode()).hexdigest()[:16]}.npy"
        images = _cached_images(cached, count)
        if images is None:
            images = decode_jpegs(archive[f"jpeg_{split}"], archive[f"offsets_{split}"], count)
            with replace_when_complete(cached) as handle:
                np.save(handle, images.numpy(), allow_pickle=False)
    return images, torch.from_numpy(labels[:count].astype(np.int64))


def _torchvision_download(dataset: str) -> ImageData:
    import torchvision

    root = cache_dir() / "torchvision"
    cls = {"cifar10": torchvision.datasets.CIFAR10, "fashion_mnist": torchvision.datasets.FashionMNIST}[dataset]
    splits = [cls(str(root), train=train, download=True) for train in (True, False)]
    tensors = []
    for split in splits:
        x = torch.as_tensor(np.asarray(split.data))
        x = x.permute(0, 3, 1, 2) if x.ndim == 4 else x.unsqueeze(1)
        tensors += [x.contiguous(), torch.as_tensor(np.asarray(split.targets), dtype=torch.int64)]
    train_x, train_y, test_x, test_y = tensors
    return ImageData(train_x, train_y, test_x, test_y, num_classes=10, source=f"torchvision download in {root}")


def load_cifar10(data_dir: str | Path | None, subset: int | None, eval_subset: int | None, download: bool) -> ImageData:
    try:
        folder = find_dataset_files("cifar10", ["cifar10_jpeg.npz"], data_dir)
    except DataNotFoundError:
        if download:
            return _torchvision_download("cifar10")
        raise
    path = folder / "cifar10_jpeg.npz"
    train_x, train_y = _cifar10_split(path, "train", subset)
    test_x, test_y = _cifar10_split(path, "test", eval_subset)
    return ImageData(train_x, train_y, test_x, test_y, num_classes=10, source=f"{path} (JPEG q75 re-encoding)")


def _idx(path: Path) -> np.ndarray:
    """Parse an IDX file (big-endian header of dims, then raw uint8 data), gzipped or not."""
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    ndim = raw[3]
    dims = np.frombuffer(raw, dtype=">u4", count=ndim, offset=4).astype(int)
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


FASHION_FILES = [
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
]


def load_fashion_mnist(data_dir: str | Path | None, download: bool) -> ImageData:
    try:
        folder = find_dataset_files("fashion_mnist", [f"{n}.gz" for n in FASHION_FILES], data_dir)
        suffix = ".gz"
    except DataNotFoundError:
        try:
            folder, suffix = find_dataset_files("fashion_mnist", FASHION_FILES, data_dir), ""
        except DataNotFoundError:
            if download:
                return _torchvision_download("fashion_mnist")
            raise
    arrays = [_idx(folder / f"{name}{suffix}") for name in FASHION_FILES]
    train_x, train_y, test_x, test_y = (torch.from_numpy(a.copy()) for a in arrays)
    return ImageData(
        train_x.unsqueeze(1), train_y.long(), test_x.unsqueeze(1), test_y.long(), num_classes=10, source=str(folder)
    )


def load_digits_data() -> ImageData:
    """sklearn's 8x8 digits (values 0-16, scaled to 0-255), split 80/20 with a fixed permutation."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = np.clip(np.rint(digits.images * (255 / 16)), 0, 255).astype(np.uint8)
    order = np.random.default_rng(0).permutation(len(images))
    x = torch.from_numpy(images[order]).unsqueeze(1)
    y = torch.from_numpy(digits.target[order].astype(np.int64))
    cut = int(0.8 * len(x))
    return ImageData(x[:cut], y[:cut], x[cut:], y[cut:], num_classes=10, source="sklearn.datasets.load_digits")


def _read_tsv(path: Path) -> tuple[list[str], torch.Tensor]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        lines = handle.read().splitlines()[1:]
    rows = [line.split("\t", 1) for line in lines if line]
    return [text for _, text in rows], torch.tensor([int(label) for label, _ in rows], dtype=torch.int64)


def load_sst2(data_dir: str | Path | None) -> TextData:
    folder = find_dataset_files("sst2", ["sst2_train.tsv.gz", "sst2_dev.tsv.gz"], data_dir)
    train_text, train_y = _read_tsv(folder / "sst2_train.tsv.gz")
    test_text, test_y = _read_tsv(folder / "sst2_dev.tsv.gz")
    return TextData(train_text, train_y, test_text, test_y, num_classes=2, source=f"{folder} (GLUE train / dev)")


def synthetic_images(num_train: int = 512, num_test: int = 128, size: int = 32, num_classes: int = 10) -> ImageData:
    """Learnable random images: a fixed noise template per class plus per-image noise."""
    generator = torch.Generator().manual_seed(0)
    templates = torch.rand(num_classes, 3, size, size, generator=generator)

    def split(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        labels = torch.arange(n) % num_classes
        images = 0.6 * templates[labels] + 0.4 * torch.rand(n, 3, size, size, generator=generator)
        return (images * 255).round().to(torch.uint8), labels

    return ImageData(*split(num_train), *split(num_test), num_classes=num_classes, source="synthetic (smoke tests)")


def synthetic_text(num_train: int = 256, num_test: int = 64) -> TextData:
    """Sentences whose label is whether positive words outnumber negative ones."""
    rng = np.random.default_rng(0)
    positive, negative = ["good", "great", "fine", "nice"], ["bad", "awful", "poor", "dull"]
    neutral = [f"word{i}" for i in range(40)]

    def split(n: int) -> tuple[list[str], torch.Tensor]:
        labels = np.arange(n) % 2
        texts = []
        for label in labels:
            words = list(rng.choice(neutral, size=int(rng.integers(4, 12))))
            words += list(rng.choice(positive if label else negative, size=3)) + list(
                rng.choice(negative if label else positive, size=1)
            )
            rng.shuffle(words)
            texts.append(" ".join(words))
        return texts, torch.from_numpy(labels.astype(np.int64))

    return TextData(*split(num_train), *split(num_test), num_classes=2, source="synthetic_text (smoke tests)")


def load_detection_shapes(data_dir: str | Path | None) -> ImageData:
    """cadence-detection's shapes set, written as COCO files (once) under `data_dir` or the cache and read back through
    torchvision's CocoDetection. ``train_y``/``test_y`` hold each image's boxes, padded: (N, K, 5) rows
    ``[label, x1, y1, x2, y2]``, label -1 past an image's last box (``cadence_detection.targets``)."""
    try:
        from cadence_detection import NUM_CLASSES, load_split_tensors, make_shapes_dataset
    except ImportError as error:
        raise RecipeError(
            "`data` = 'detection_shapes' needs cadence-detection: pip install ./packages/detection"
        ) from error
    root = make_shapes_dataset(Path(data_dir) if data_dir else cache_dir() / "detection_shapes")
    (train_x, train_y), (test_x, test_y) = (load_split_tensors(root, split) for split in ("train", "val"))
    source = f"{root} (shapes on textured backgrounds, COCO format, made by cadence-detection)"
    return ImageData(train_x, train_y, test_x, test_y, num_classes=NUM_CLASSES, source=source, kind="detection")


def _subset(data: ImageData | TextData, subset: int | None, eval_subset: int | None) -> ImageData | TextData:
    """Keep the first `subset` training and `eval_subset` test samples (the files are already shuffled)."""
    keep = {"train": slice(subset), "test": slice(eval_subset)}
    splits = [f.name for f in fields(data) if f.name.startswith(("train_", "test_"))]
    return replace(data, **{name: getattr(data, name)[keep[name.split("_")[0]]] for name in splits})


def load_dataset(
    name: str,
    *,
    data_dir: str | Path | None = None,
    subset: int | None = None,
    eval_subset: int | None = None,
    download: bool = False,
) -> ImageData | TextData:
    """Load a dataset by name; `subset`/`eval_subset` keep the first N train/test samples."""
    check_dataset(name)
    check_data_dir(data_dir)
    loaders: dict[str, Callable[[], ImageData | TextData]] = {
        "cifar10": lambda: load_cifar10(data_dir, subset, eval_subset, download),
        "fashion_mnist": lambda: load_fashion_mnist(data_dir, download),
        "digits": load_digits_data,
        "synthetic": synthetic_images,
        "sst2": lambda: load_sst2(data_dir),
        "synthetic_text": synthetic_text,
        "detection_shapes": lambda: load_detection_shapes(data_dir),
    }
    return _subset(loaders[name](), subset, eval_subset)
