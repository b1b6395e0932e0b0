"""The ``retinanet`` head: anchors, assignment, losses, post-processing, the part contract, the
export forms, and a tiny end-to-end training through ``build_model``."""

from __future__ import annotations

import io
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from modforge.components.boxes import DELTA_CLIP, box_iou, decode_deltas, encode_deltas
from modforge.components.heads.retinanet import (
    IGNORED,
    RetinaNetHead,
    base_anchors,
    level_anchors,
    retinanet_decode,
    retinanet_outputs,
    retinanet_postprocess,
    retinanet_targets,
)
from modforge.testing import check_part
from part_checks import CORE_CHECKS, assert_contract

torchvision = pytest.importorskip("torchvision")
pytestmark = pytest.mark.filterwarnings("ignore:.*torch.jit.(script|trace).* is deprecated:DeprecationWarning")


# ------------------------------------------------------------- anchors
def test_base_anchors_have_the_paper_sizes_and_ratios():
    cell = base_anchors(8, 4.0, 3, [0.5, 1.0, 2.0])
    assert cell.shape == (9, 4)
    wh = cell[:, 2:] - cell[:, :2]
    sizes = [32 * 2 ** (k / 3) for k in range(3)] * 3  # ratio-major, then scale
    assert torch.allclose((wh[:, 0] * wh[:, 1]).sqrt(), torch.tensor(sizes), rtol=1e-5)  # area = size²
    assert torch.allclose(wh[:, 1] / wh[:, 0], torch.tensor([0.5] * 3 + [1.0] * 3 + [2.0] * 3), rtol=1e-5)
    assert torch.allclose(cell[:, :2], -cell[:, 2:])  # centred on the origin


def test_level_anchors_are_location_major_on_pixel_centres():
    cells = [base_anchors(s, 2.0, 1, [1.0, 2.0]) for s in (4, 8)]
    anchors = level_anchors([[2, 3], [1, 2]], [4, 8], cells, torch.float32, torch.device("cpu"))
    assert anchors.shape == ((2 * 3 + 1 * 2) * 2, 4)
    centres = (anchors[:, :2] + anchors[:, 2:]) / 2
    # level 0, row 0: x = 2, 2, 6, 6, 10, 10 (two anchors per location); row 1 at y = 6
    assert centres[:6, 0].tolist() == [2, 2, 6, 6, 10, 10] and centres[:6, 1].tolist() == [2] * 6
    assert centres[6:12, 1].tolist() == [6] * 6
    assert centres[12:].tolist() == [[4, 4], [4, 4], [12, 4], [12, 4]]
    assert torch.equal(anchors[:2] - anchors[2:4], torch.tensor([[-4.0, 0, -4, 0]] * 2))


def test_delta_coding_round_trips_and_clips_the_log_sizes():
    g = torch.Generator().manual_seed(0)
    anchors = torch.rand(40, 2, generator=g) * 50
    anchors = torch.cat([anchors, anchors + 5 + torch.rand(40, 2, generator=g) * 40], dim=1)
    boxes = torch.rand(40, 2, generator=g) * 50
    boxes = torch.cat([boxes, boxes + 1 + torch.rand(40, 2, generator=g) * 60], dim=1)
    assert torch.allclose(decode_deltas(anchors, encode_deltas(anchors, boxes)), boxes, atol=1e-4)
    # by hand: a 10×10 anchor at (0, 0) and a 20×5 box centred at (7, 5)
    got = encode_deltas(torch.tensor([[0.0, 0, 10, 10]]), torch.tensor([[-3.0, 2.5, 17, 7.5]]))
    assert torch.allclose(got, torch.tensor([[0.2, 0.0, math.log(2), math.log(0.5)]]))
    huge = decode_deltas(torch.tensor([[0.0, 0, 16, 16]]), torch.tensor([[0.0, 0, 50, 50]]))
    assert torch.allclose(huge[0, 2] - huge[0, 0], torch.tensor(16 * math.exp(DELTA_CLIP)))  # 1000 px, not inf


# ------------------------------------------------------------- assignment
def brute_force_targets(anchors, boxes, labels, num_classes, fg, bg, low_quality):
    """The assignment rules of the module doc, one anchor at a time."""
    iou = box_iou(boxes, anchors)
    out = []
    for p in range(anchors.shape[0]):
        best, which = float(iou[:, p].max()), int(iou[:, p].argmax())
        label = int(labels[which]) if best >= fg else (num_classes if best < bg else IGNORED)
        if low_quality and any(float(iou[g, p]) == float(iou[g].max()) > 0 for g in range(boxes.shape[0])):
            label = int(labels[which])
        out.append(label)
    return out


@pytest.mark.parametrize("low_quality", [True, False])
def test_assignment_matches_a_brute_force_loop(low_quality):
    cells = [base_anchors(s, 2.0, 2, [0.5, 1.0, 2.0]) for s in (4, 8, 16)]
    anchors = level_anchors([[16, 16], [8, 8], [4, 4]], [4, 8, 16], cells, torch.float32, torch.device("cpu"))
    boxes = torch.tensor([[3.0, 5, 13, 14], [20, 20, 60, 50], [30, 2, 34, 40], [40, 40, 47, 47]])
    labels = torch.tensor([2, 0, 1, 2])
    assigned, matched = retinanet_targets(anchors, boxes, labels, 3, 0.5, 0.4, low_quality)
    assert assigned.tolist() == brute_force_targets(anchors, boxes, labels, 3, 0.5, 0.4, low_quality)
    positive = (assigned >= 0) & (assigned < 3)
    assert positive.any() and (assigned == IGNORED).any() and (assigned == 3).any()
    iou = box_iou(boxes, anchors)
    assert torch.equal(matched[positive], boxes[iou.argmax(dim=0)][positive])
    assert torch.equal(matched[~positive], torch.zeros_like(matched[~positive]))
    thin = 2  # the 4×38 px box: no anchor reaches 0.5, low-quality matching still trains one
    reaching = iou[thin] >= 0.5
    assert not reaching.any() and ((assigned == 1) & positive).any() == low_quality


def test_no_boxes_is_all_background_and_crowds_are_dropped():
    head = RetinaNetHead([16, 16], num_classes=2, strides=[8, 16], tower_depth=1)
    assigned, matched = retinanet_targets(torch.tensor([[0.0, 0, 8, 8]]), torch.zeros(0, 4),
                                          torch.zeros(0, dtype=torch.long), 2)  # fmt: skip
    assert assigned.tolist() == [2] and matched.abs().sum() == 0
    box = {"boxes": torch.tensor([[0.0, 0, 32, 32]]), "labels": torch.tensor([1])}
    _, labels, _ = head.assign([[4, 4], [2, 2]], [{**box, "iscrowd": torch.tensor([1])}], torch.float32,
                               torch.device("cpu"))  # fmt: skip
    assert (labels == 2).all()
    with pytest.raises(ValueError, match="labels must be in 0..1"):
        head.assign([[4, 4], [2, 2]], [{"boxes": box["boxes"], "labels": torch.tensor([5])}], torch.float32,
                    torch.device("cpu"))  # fmt: skip


# ------------------------------------------------------------- losses
def _features(head: RetinaNetHead, size: int = 64, batch: int = 2, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, 16, size // s, size // s, generator=g) for s in head.strides]


@pytest.mark.parametrize("kind", ["l1", "smooth_l1", "giou"])
def test_losses_are_focal_and_box_terms_over_positives(kind):
    torch.manual_seed(0)
    head = RetinaNetHead([16, 16, 16], num_classes=3, tower_depth=1, anchor_scale=2.0, box_loss=kind)
    raw = head.net(_features(head))
    targets = [{"boxes": torch.tensor([[4.0, 4, 24, 24], [30, 30, 60, 50]]), "labels": torch.tensor([0, 2])},
               {"boxes": torch.tensor([[10.0, 40, 30, 62]]), "labels": torch.tensor([1])}]  # fmt: skip
    got = head.losses(raw, targets)
    # the same figures from the definitions, with the head's own assignment
    anchors, labels, boxes = head.assign([[r.shape[2], r.shape[3]] for r in raw], targets, torch.float32,
                                         torch.device("cpu"))  # fmt: skip
    logits, deltas = [], []
    for r in raw:  # [B, A·(C+4), H, W] → per anchor
        b, _, h, w = r.shape
        logits.append(r[:, :27].reshape(b, 9, 3, h, w).permute(0, 3, 4, 1, 2).reshape(b, -1, 3))
        deltas.append(r[:, 27:].reshape(b, 9, 4, h, w).permute(0, 3, 4, 1, 2).reshape(b, -1, 4))
    logits, deltas = torch.cat(logits, 1), torch.cat(deltas, 1)
    positive = (labels >= 0) & (labels < 3)
    n = positive.sum().float()
    p = torch.sigmoid(logits)
    t = F.one_hot(labels.clamp(min=0), 4)[..., :3].float()
    focal = -(0.25 * t * (1 - p) ** 2 * torch.log(p) + 0.75 * (1 - t) * p**2 * torch.log(1 - p)).sum(-1)
    assert got["cls_loss"].item() == pytest.approx((focal[labels != IGNORED].sum() / n).item(), rel=1e-4)
    a = anchors.expand(2, -1, -1)[positive]
    if kind == "giou":
        expected = (1 - torchvision.ops.generalized_box_iou(decode_deltas(a, deltas[positive]), boxes[positive])
                    .diagonal()).sum()  # fmt: skip
    else:
        diff = (deltas[positive] - encode_deltas(a, boxes[positive])).abs()
        expected = (diff if kind == "l1" else torch.where(diff < 1 / 9, 0.5 * diff**2 * 9, diff - 0.5 / 9)).sum()
    assert got["box_loss"].item() == pytest.approx((expected / n).item(), rel=1e-4)
    got["cls_loss"].backward(retain_graph=True)


def test_losses_survive_images_without_objects():
    head = RetinaNetHead([16, 16, 16], num_classes=3, tower_depth=1)
    raw = head.net(_features(head))
    empty = {"boxes": torch.zeros(0, 4), "labels": torch.zeros(0, dtype=torch.long)}
    got = head.losses(raw, [empty, empty])
    assert got["box_loss"].item() == 0 and got["box_loss"].requires_grad
    assert torch.isfinite(got["cls_loss"]) and got["cls_loss"] > 0  # every anchor is a negative, / 1
    with pytest.raises(ValueError, match="1 targets for a batch of 2"):
        head.losses(raw, [empty])


# ------------------------------------------------------------- inference and export
def _confident_raw(head: RetinaNetHead, seed: int = 0) -> list[torch.Tensor]:
    """Raw maps whose class logits spread over the threshold, so every stage has candidates."""
    g = torch.Generator().manual_seed(seed)
    split = head.num_anchors * head.num_classes
    raw = []
    for s in head.strides:  # class logits spread around 0, deltas of a fraction of an anchor
        level = torch.randn(2, head.out_dim[0], 64 // s, 64 // s, generator=g)
        raw.append(torch.cat([level[:, :split] * 2 - 1, level[:, split:] * 0.5], dim=1))
    return raw


def test_postprocess_ranks_by_probability_and_decode_agrees():
    torch.manual_seed(0)
    head = RetinaNetHead([16, 16, 16], num_classes=3, tower_depth=1).eval()
    raw = _confident_raw(head)
    sizes = torch.tensor([[64, 64], [60, 50]])
    dt = retinanet_postprocess(raw, head.strides, head.cell_anchors, 3, sizes, 0.05, 1000, 0.5, 100)
    boxes, prob, levels = retinanet_decode(raw, head.strides, head.cell_anchors, 3)
    assert boxes.shape == (2, 9 * (64 + 16 + 4), 4) and levels[0, -1] == 2
    first = dt[dt[:, 0] == 1][0]  # the best (anchor, class) of image 1 is its first detection
    best = int(prob[1].flatten().argmax())
    expected = boxes[1, best // 3].clone()
    expected[0::2] = expected[0::2].clamp(0, 50)
    expected[1::2] = expected[1::2].clamp(0, 60)
    assert first[1:5].tolist() == expected.tolist() and first[6] == best % 3
    assert first[5].item() == pytest.approx(prob[1].max().item())
    for i, (h, w) in enumerate(sizes.tolist()):
        mine = dt[dt[:, 0] == i]
        assert 0 < len(mine) <= 100 and (mine[:, 5] > 0.05).all()
        assert (mine[:, [1, 3]] <= w).all() and (mine[:, [2, 4]] <= h).all() and (mine[:, 1:5] >= 0).all()
        assert mine[:, 5].tolist() == sorted(mine[:, 5].tolist(), reverse=True)
        for c in range(3):  # class-aware NMS: no two kept boxes of one class overlap above 0.5
            same = mine[mine[:, 6] == c, 1:5]
            iou = box_iou(same, same) - torch.eye(len(same))
            assert (iou <= 0.5).all()


@pytest.mark.parametrize(("threshold", "topk", "nms", "most"), [(0.05, 1000, 0.5, 100), (0.3, 7, 0.3, 5)])
def test_numpy_postprocessing_is_retinanet_postprocess(threshold, topk, nms, most):
    """``modforge predict``'s numpy rule on the exported columns gives the head's own rows: the
    same images, boxes, labels and order bit for bit, and the same scores."""
    from modforge.tasks.detection.predict import postprocess

    torch.manual_seed(1)
    head = RetinaNetHead([16, 16, 16], num_classes=3, tower_depth=1, score_threshold=threshold, pre_nms_topk=topk,
                         nms_threshold=nms, max_detections=most).eval()  # fmt: skip
    raw = _confident_raw(head, seed=1)
    sizes = torch.tensor([[64, 64], [40, 60]])
    expected = head.predict(raw, sizes).numpy()
    outputs = retinanet_outputs(raw, head.strides, head.cell_anchors, 3).numpy()
    got = postprocess(outputs, sizes.numpy(), head.export_settings())
    assert len(expected) > 0 and got.shape == expected.shape
    assert np.array_equal(got[:, [0, 1, 2, 3, 4, 6]], expected[:, [0, 1, 2, 3, 4, 6]])
    assert np.array_equal(got[:, 5], expected[:, 5])


def test_network_scripts_and_decoding_exports_to_onnx():
    torch.manual_seed(0)
    head = RetinaNetHead([16, 16, 16], num_classes=3, tower_depth=1, norm_groups=4).eval()
    feats = _features(head)
    with torch.no_grad():
        eager = head.net(feats)
        assert all(torch.equal(a, b) for a, b in zip(eager, torch.jit.script(head.net)(feats), strict=True))

    class Decoded(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = head.net

        def forward(self, p3, p4, p5):
            return retinanet_outputs(self.net([p3, p4, p5]), head.strides, head.cell_anchors, 3)

    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Decoded(), tuple(feats), buffer, dynamo=False,
                          dynamic_axes={f"p{i}": {0: "b", 2: f"h{i}", 3: f"w{i}"} for i in range(3)},
                          input_names=["p0", "p1", "p2"])  # fmt: skip
    session = ort.InferenceSession(buffer.getvalue())
    for size in (64, 96):  # free map sizes: the anchors follow them
        other = _features(head, size=size, batch=1, seed=3)
        with torch.no_grad():
            reference = Decoded()(*other)
        got = torch.from_numpy(session.run(None, {f"p{i}": t.numpy() for i, t in enumerate(other)})[0])
        assert got.shape == reference.shape
        assert float((got[..., :4] - reference[..., :4]).abs().max()) <= 1e-3  # pixels
        assert torch.allclose(got[..., 4:], reference[..., 4:], atol=1e-5)


# ------------------------------------------------------------- contract and training
def test_the_head_passes_the_conformance_suite():
    assert_contract(check_part("head", RetinaNetHead), CORE_CHECKS | {"batch_independence"})


def test_settings_are_checked():
    with pytest.raises(ValueError, match="bg_iou"):
        RetinaNetHead([16, 16], num_classes=2, fg_iou=0.4, bg_iou=0.5)
    with pytest.raises(ValueError, match="strides"):
        RetinaNetHead([16, 16, 16], num_classes=2, strides=[8, 16])
    head = RetinaNetHead([256] * 5, 80)
    assert head.strides == [8, 16, 32, 64, 128] and head.out_dim == [9 * 84] * 5 and head.num_anchors == 9
    assert len(head.net.cls_tower) == 8 and isinstance(head.net.cls_tower[1], torch.nn.ReLU)  # the paper: no norm
    assert torch.allclose(torch.sigmoid(head.net.cls_logits.bias), torch.full((720,), 0.01))


def test_tiny_training_through_build_model_recovers_the_boxes():
    from tests.test_fcos import assert_finds_every_square, fit_squares

    head = {"type": "retinanet", "args": {"feat_channels": 32, "tower_depth": 2, "norm_groups": 8, "anchor_scale": 3.0,
                                          "score_threshold": 0.2}}  # fmt: skip
    history, dt, targets = fit_squares(head, {"cls_loss", "box_loss"})
    assert sum(history[-5:]) / 5 < 0.3 * history[0], history[::10]
    assert_finds_every_square(dt, targets, 0.2)


# ------------------------------------------------------------- against torchvision's RetinaNet pieces
@pytest.mark.parametrize("low_quality", [True, False])
def test_assignment_and_delta_coding_equal_torchvisions_retinanet(low_quality):
    """torchvision's RetinaNet assigns with ``Matcher(0.5, 0.4, allow_low_quality_matches=True)`` and
    codes boxes with ``BoxCoder((1, 1, 1, 1))``: on the same anchors and boxes, the same positives (with
    the same box), ignored anchors and background, and the same deltas and decoded boxes."""
    from torchvision.models.detection._utils import BoxCoder, Matcher

    g = torch.Generator().manual_seed(3)
    cells = [base_anchors(s, 2.0, 3, [0.5, 1.0, 2.0]) for s in (4, 8, 16)]
    anchors = level_anchors([[16, 16], [8, 8], [4, 4]], [4, 8, 16], cells, torch.float32, torch.device("cpu"))
    corner = torch.rand(12, 2, generator=g) * 50
    boxes = torch.cat([corner, corner + 4 + torch.rand(12, 2, generator=g) * 30], dim=1)
    labels = torch.randint(0, 3, (12,), generator=g)
    assigned, matched = retinanet_targets(anchors, boxes, labels, 3, 0.5, 0.4, low_quality)
    matches = Matcher(0.5, 0.4, allow_low_quality_matches=low_quality)(box_iou(boxes, anchors))
    positive = matches >= 0
    assert positive.any() and (matches == Matcher.BETWEEN_THRESHOLDS).any()
    assert torch.equal((assigned >= 0) & (assigned < 3), positive)
    assert torch.equal(assigned == IGNORED, matches == Matcher.BETWEEN_THRESHOLDS)
    assert torch.equal(assigned == 3, matches == Matcher.BELOW_LOW_THRESHOLD)
    assert torch.equal(assigned[positive], labels[matches[positive]])
    assert torch.equal(matched[positive], boxes[matches[positive]])
    coder = BoxCoder((1.0, 1.0, 1.0, 1.0))
    reference = coder.encode_single(matched[positive], anchors[positive])
    assert torch.allclose(encode_deltas(anchors[positive], matched[positive]), reference, atol=1e-5)
    deltas = torch.randn(len(anchors), 4, generator=g)
    assert torch.allclose(decode_deltas(anchors, deltas), coder.decode_single(deltas, anchors), atol=1e-3)
