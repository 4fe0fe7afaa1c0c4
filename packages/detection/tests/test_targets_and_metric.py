"""Box targets in both forms, and COCO mAP against boxes checked by hand."""

from __future__ import annotations

import pytest
import torch

from cadence_detection import DetectionMAP, pad_targets, unpad_targets


def _target(boxes: list[list[float]], labels: list[int]) -> dict[str, torch.Tensor]:
    return {"boxes": torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4), "labels": torch.tensor(labels)}


def test_padding_keeps_each_images_own_number_of_boxes() -> None:
    targets = [_target([[1, 2, 3, 4], [5, 6, 7, 8]], [1, 3]), _target([], []), _target([[0, 0, 9, 9]], [2])]
    padded = pad_targets(targets)
    assert padded.shape == (3, 2, 5)
    assert padded[1, :, 0].tolist() == [-1, -1] and padded[2, 1, 0] == -1
    back = unpad_targets(padded)
    assert [len(t["labels"]) for t in back] == [2, 0, 1]
    for original, restored in zip(targets, back):
        assert torch.equal(original["boxes"], restored["boxes"]) and torch.equal(original["labels"], restored["labels"])


def test_targets_of_another_shape_are_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"\(N, K, 5\).*\(2, 4\)"):
        unpad_targets(torch.zeros(2, 4))
    with pytest.raises(TypeError, match="list of"):
        unpad_targets("boxes")
    with pytest.raises(ValueError, match=r"targets\[0\]: boxes must be \(K, 4\)"):
        pad_targets([{"boxes": torch.zeros(2, 3), "labels": torch.zeros(2)}])


def _map(prediction: list[float], key: str = "map") -> float:
    metric = DetectionMAP(key=key)
    truth = _target([[10, 10, 20, 20]], [1])
    metric.update(
        [{"boxes": torch.tensor([prediction]), "scores": torch.tensor([0.9]), "labels": torch.tensor([1])}], [truth]
    )
    return float(metric.compute())


def test_a_perfect_prediction_scores_one() -> None:
    assert _map([10, 10, 20, 20]) == pytest.approx(1.0)


def test_a_box_shifted_by_two_pixels_scores_four_tenths() -> None:
    # overlap 8 x 10 = 80, union 100 + 100 - 80 = 120: IoU 2/3 clears the thresholds .50, .55, .60, .65
    # and misses .70 ... .95, so AP is 1 at 4 of COCO's 10 thresholds and 0 at the others.
    shifted = [12, 10, 22, 20]
    assert _map(shifted) == pytest.approx(0.4)
    assert _map(shifted, "map_50") == pytest.approx(1.0)
    assert _map(shifted, "map_75") == pytest.approx(0.0)


def test_the_whole_result_dict_is_kept_and_a_bad_key_refused() -> None:
    metric = DetectionMAP()
    metric.update(
        [{"boxes": torch.tensor([[0.0, 0, 5, 5]]), "scores": torch.tensor([1.0]), "labels": torch.tensor([2])}],
        [_target([[0, 0, 5, 5]], [2])],
    )
    metric.compute()
    assert {"map", "map_50", "mar_100"} <= set(metric.results)
    with pytest.raises(ValueError, match="key='mAP'"):
        DetectionMAP(key="mAP")


def test_every_public_name_resolves() -> None:
    import cadence_detection

    for name in cadence_detection.__all__:
        assert getattr(cadence_detection, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'YOLOX'"):
        _ = cadence_detection.YOLOX
