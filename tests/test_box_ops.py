"""Box ops (``modforge.components.boxes``) against brute-force Python references."""

from __future__ import annotations

import itertools

import pytest
import torch

from modforge.components.boxes import (
    batched_nms,
    box_area,
    box_iou,
    decode_ltrb,
    encode_ltrb,
    generalized_box_iou,
    nms,
)

EPS = 1e-6
pytestmark = pytest.mark.filterwarnings("ignore:.*torch.jit.(script|trace).* is deprecated:DeprecationWarning")


# ---------------------------------------------------------------- references
def ref_area(b):
    return max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])


def ref_iou(a, b):
    inter = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = ref_area(a) + ref_area(b) - inter
    return inter / max(union, EPS)


def ref_giou(a, b):
    inter = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = ref_area(a) + ref_area(b) - inter
    hull = max(0.0, max(a[2], b[2]) - min(a[0], b[0])) * max(0.0, max(a[3], b[3]) - min(a[1], b[1]))
    return inter / max(union, EPS) - (hull - union) / max(hull, EPS)


def ref_nms(boxes, scores, threshold, groups=None):
    """Greedy NMS, one box at a time (torchvision's definition)."""
    n = len(boxes)
    groups = groups if groups is not None else [0] * n
    kept = []
    for i in sorted(range(n), key=lambda i: (-scores[i], i)):
        if all(groups[i] != groups[j] or ref_iou(boxes[i], boxes[j]) <= threshold for j in kept):
            kept.append(i)
    return kept


def random_boxes(n, seed, degenerate=True, dtype=torch.float64):
    """Random boxes in a 100×100 image, with flat, inverted, point-like and repeated boxes mixed in."""
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g, dtype=dtype) * 80
    wh = torch.rand(n, 2, generator=g, dtype=dtype) * 40 + 1
    boxes = torch.cat([xy, xy + wh], dim=1)
    if degenerate and n >= 8:
        boxes[0, 2] = boxes[0, 0]  # zero width
        boxes[1, 3] = boxes[1, 1] - 5  # inverted (y2 < y1)
        boxes[2, 2:] = boxes[2, :2]  # a point
        boxes[3] = boxes[4]  # a duplicate
        boxes[5] = boxes[2]  # a duplicate point
    return boxes


# ---------------------------------------------------------------- IoU / GIoU
def test_area_clamps_degenerate_boxes():
    boxes = torch.tensor([[0, 0, 2, 3], [5, 5, 5, 9], [4, 4, 1, 1]], dtype=torch.float32)
    assert box_area(boxes).tolist() == [6.0, 0.0, 0.0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pairwise_iou_and_giou_match_brute_force(seed):
    a, b = random_boxes(12, seed), random_boxes(9, seed + 100)
    b[0] = a[2]  # identical degenerate pair: 0/0 is defined as 0
    iou, giou = box_iou(a, b), generalized_box_iou(a, b)
    assert iou.shape == giou.shape == (12, 9)
    for i, j in itertools.product(range(12), range(9)):
        ra, rb = a[i].tolist(), b[j].tolist()
        assert iou[i, j].item() == pytest.approx(ref_iou(ra, rb), abs=1e-9)
        assert giou[i, j].item() == pytest.approx(ref_giou(ra, rb), abs=1e-9)
    assert ((iou >= 0) & (iou <= 1)).all() and ((giou >= -1) & (giou <= 1)).all()
    assert torch.isfinite(iou).all() and torch.isfinite(giou).all()


def test_aligned_iou_is_the_diagonal_and_gradients_stay_finite():
    a = random_boxes(10, 3).float().requires_grad_(True)
    b = random_boxes(10, 4).float()
    b[2] = a[2].detach()  # the same point: union and hull both 0
    assert torch.allclose(box_iou(a, b, aligned=True), box_iou(a, b).diagonal())
    giou = generalized_box_iou(a, b, aligned=True)
    assert torch.allclose(giou, generalized_box_iou(a, b).diagonal())
    giou.sum().backward()
    assert torch.isfinite(a.grad).all()
    with pytest.raises(ValueError, match="one shape"):
        box_iou(a, b[:3], aligned=True)


def test_iou_of_known_boxes():
    a = torch.tensor([[0.0, 0.0, 10.0, 10.0]])
    b = torch.tensor([[5.0, 0.0, 15.0, 10.0], [20.0, 0.0, 30.0, 10.0], [0.0, 0.0, 10.0, 10.0]])
    assert box_iou(a, b)[0].tolist() == pytest.approx([50 / 150, 0.0, 1.0])
    # disjoint boxes: IoU 0, the hull is 30×10 and the union 200 → GIoU = −100/300
    assert generalized_box_iou(a, b)[0].tolist() == pytest.approx([50 / 150, -1 / 3, 1.0])


def test_empty_inputs():
    empty, some = torch.zeros(0, 4), random_boxes(5, 0).float()
    assert box_iou(empty, some).shape == (0, 5)
    assert generalized_box_iou(some, empty).shape == (5, 0)
    assert nms(empty, torch.zeros(0), 0.5).shape == (0,)
    assert batched_nms(empty, torch.zeros(0), torch.zeros(0, dtype=torch.long), 0.5).dtype == torch.long


# ---------------------------------------------------------------- encode / decode
def test_encode_decode_round_trip():
    g = torch.Generator().manual_seed(0)
    boxes = random_boxes(50, 7, degenerate=False)
    points = torch.rand(50, 2, generator=g, dtype=torch.float64) * 120 - 10  # inside or outside
    distances = encode_ltrb(points, boxes)
    assert torch.allclose(decode_ltrb(points, distances), boxes)
    inside = (points > boxes[:, :2]).all(1) & (points < boxes[:, 2:]).all(1)
    assert torch.equal((distances > 0).all(1), inside)
    # by hand: the point (3, 4) in the box (1, 1, 10, 6)
    assert encode_ltrb(torch.tensor([[3.0, 4.0]]), torch.tensor([[1.0, 1.0, 10.0, 6.0]])).tolist() == [[2, 3, 7, 2]]


def test_decode_clips_to_each_image():
    points = torch.tensor([[[5.0, 5.0]], [[5.0, 5.0]]])  # [B=2, 1, 2]
    distances = torch.full((2, 1, 4), 10.0)
    sizes = torch.tensor([[8, 20], [100, 6]])  # (h, w) per image
    boxes = decode_ltrb(points, distances, sizes.unsqueeze(1))
    assert boxes.tolist() == [[[0, 0, 15, 8]], [[0, 0, 6, 15]]]


# ---------------------------------------------------------------- NMS
@pytest.mark.parametrize(("seed", "threshold"), [(0, 0.5), (1, 0.3), (2, 0.7), (3, 0.0)])
def test_nms_matches_greedy_brute_force(seed, threshold):
    boxes = random_boxes(60, seed)
    g = torch.Generator().manual_seed(seed)
    scores = torch.round(torch.rand(60, generator=g, dtype=torch.float64) * 10) / 10  # many ties
    kept = nms(boxes, scores, threshold)
    assert kept.tolist() == ref_nms(boxes.tolist(), scores.tolist(), threshold)


def test_nms_chain_needs_the_kept_set_not_just_overlaps():
    # A suppresses B, B would suppress C, but B is gone so C stays (a fixed point, not one pass)
    boxes = torch.tensor([[0.0, 0, 10, 10], [3.0, 0, 13, 10], [6.0, 0, 16, 10], [9.0, 0, 19, 10]])
    scores = torch.tensor([0.9, 0.8, 0.7, 0.6])
    assert nms(boxes, scores, 0.4).tolist() == ref_nms(boxes.tolist(), scores.tolist(), 0.4) == [0, 2]


@pytest.mark.parametrize("seed", [0, 1])
def test_batched_nms_equals_per_class_nms(seed):
    boxes = random_boxes(80, seed)
    g = torch.Generator().manual_seed(seed + 10)
    scores = torch.rand(80, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 4, (80,), generator=g)
    kept = batched_nms(boxes, scores, labels, 0.5)
    per_class = []
    for c in range(4):
        idx = torch.nonzero(labels == c).reshape(-1)
        per_class += idx[nms(boxes[idx], scores[idx], 0.5)].tolist()
    per_class.sort(key=lambda i: (-scores[i].item(), i))
    assert kept.tolist() == per_class
    assert kept.tolist() == ref_nms(boxes.tolist(), scores.tolist(), 0.5, labels.tolist())
    # identical boxes of two classes both survive
    two = torch.tensor([[0.0, 0, 10, 10], [0.0, 0, 10, 10]])
    assert batched_nms(two, torch.tensor([0.9, 0.8]), torch.tensor([0, 1]), 0.5).tolist() == [0, 1]
    assert nms(two, torch.tensor([0.9, 0.8]), 0.5).tolist() == [0]


def test_batched_nms_under_torchscript_agrees_and_differs_from_the_coordinate_trick_only_by_rounding():
    torchvision = pytest.importorskip("torchvision")
    boxes = random_boxes(70, 5).float()
    scores = torch.rand(70, generator=torch.Generator().manual_seed(5))
    labels = torch.randint(0, 3, (70,), generator=torch.Generator().manual_seed(6))
    reference = batched_nms(boxes, scores, labels, 0.45)
    scripted = torch.jit.script(batched_nms)
    assert torch.equal(scripted(boxes, scores, labels, 0.45), reference)
    # torchvision's own batched NMS keeps the same boxes here (no IoU sits at the threshold)
    assert torchvision.ops.batched_nms(boxes, scores, labels, 0.45).tolist() == reference.tolist()
    assert torch.equal(torch.jit.script(nms)(boxes, scores, 0.45), nms(boxes, scores, 0.45))
    assert torch.equal(torch.jit.script(decode_ltrb)(boxes[:, :2], boxes, None), decode_ltrb(boxes[:, :2], boxes))


def test_an_iou_exactly_at_the_threshold_keeps_both_boxes_as_predicts_numpy_nms_does():
    """IoU 60/100 is float32's 0.6, a hair above the double 0.6: the kernel's double comparison would
    drop the second box; rounded to float32 first, the threshold keeps it, as the numpy NMS of
    ``modforge predict`` (float32 throughout) does — eager and exported detections stay equal."""
    import numpy as np

    from modforge.tasks.detection.predict import _greedy_nms

    boxes = torch.tensor([[0.0, 0, 10, 10], [0.0, 0, 10, 6]])
    scores = torch.tensor([0.9, 0.8])
    assert box_iou(boxes[:1], boxes[1:]).item() == np.float32(0.6)
    assert nms(boxes, scores, 0.6).tolist() == [0, 1]
    kept = _greedy_nms(boxes.numpy(), scores.numpy(), np.zeros(2, dtype=np.int64), np.float32(0.6), 100)
    assert kept.tolist() == [0, 1]
    assert nms(boxes, scores, 0.59).tolist() == [0]
