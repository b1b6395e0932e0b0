"""``retinanet`` — the anchor-based one-stage detection head of RetinaNet (Lin et al., "Focal
Loss for Dense Object Detection", ICCV 2017), on torchvision's box operations.

What it follows: the paper, as torchvision's ``RetinaNet`` and mmdetection's ``RetinaHead``
implement it.

* **Anchors** (:func:`level_anchors`). At every location of level ``l`` (stride ``s``),
  ``len(aspect_ratios) × octave_scales`` anchors: sizes ``anchor_scale · s · 2^(k/octave_scales)``
  for ``k = 0 … octave_scales − 1`` (the paper: scale 4, three octave steps), each at every
  aspect ratio ``h/w`` (the paper: ½, 1, 2; the area stays ``size²``). Ordered location-major
  (row-major over the map), then ratio, then scale — torchvision's order. The anchors are centred
  on the location's pixel centre ``((j + ½)·s, (i + ½)·s)``, like the ``fcos`` head's locations
  (torchvision centres them on ``(j·s, i·s)``, mmdetection on ``(j·s, i·s)`` too: half a stride
  up and left of the pixels they stand for).
* **Network** (:class:`RetinaNetNet`). A classification and a box subnet of ``tower_depth`` ×
  (3×3 conv → [GroupNorm] → ReLU), *shared by every level* (the paper: 4 convolutions, no
  normalisation; ``norm_groups`` adds GroupNorm, torchvision's RetinaNet v2); 3×3 predictors for
  ``A × num_classes`` logits and ``A × 4`` box deltas. Initialisation as the paper: N(0, 0.01)
  weights, zero biases, the classification bias ``−log((1 − π)/π)`` with the prior ``π``.
* **Assignment** (:func:`retinanet_targets`). IoU of every anchor with every ground-truth box
  (``torchvision.ops.box_iou``): an anchor whose best IoU is at least ``fg_iou`` (0.5) is a
  positive of its best box, below ``bg_iou`` (0.4) background, in between ignored (no loss). With
  ``low_quality_matches`` (torchvision's ``allow_low_quality_matches``, mmdetection's
  ``min_pos_iou``) each box also claims the anchors it overlaps best, ties included, so a box no
  anchor covers at ``fg_iou`` — a small or thin one — still trains some anchor; such an anchor
  is assigned its own best box (torchvision's rule). Crowd boxes are dropped first.
* **Losses**, as separate batch keys the model sums: ``cls_loss`` — sigmoid focal loss (α 0.25,
  γ 2, ``torchvision.ops.sigmoid_focal_loss``) over every anchor that is not ignored, divided by
  the number of positives in the batch (clamped at 1, mmdetection's normalisation); ``box_loss``
  — over positives, ``box_loss="l1"``: L1 on the deltas (torchvision), ``"smooth_l1"`` with
  ``beta`` 1/9 (Detectron), or ``"giou"``: 1 − GIoU of the decoded boxes
  (``torchvision.ops.generalized_box_iou_loss``), divided by the same count.
* **Inference** (:func:`retinanet_postprocess`). Per level and image, the (anchor, class) pairs
  whose probability exceeds ``score_threshold`` are ranked by probability and the best
  ``pre_nms_topk`` kept; their boxes are decoded (log-sizes clipped at log(1000/16)) and clipped
  to the image, the score is the probability, and class-aware NMS (IoU ``nms_threshold``, 0.5)
  runs per image on torchvision's kernel, keeping at most ``max_detections``.

The batch, export and the split into network, decoding and post-processing are the ``fcos``
head's (its module doc): ``dict_io``, feature maps from ``embedding`` or ``features``, ``targets``
and ``image_sizes``; ``logits`` (raw maps ``[B, A·(C + 4), H, W]``: class logits of every anchor,
then its deltas), the ``*_loss`` keys when targets are present, ``dt_bboxes`` in eval mode. An
exported detector ends at :func:`retinanet_outputs` — every anchor's decoded box, class
probabilities and level, ``[B, P·A, C + 5]`` — and ``modforge predict`` thresholds, ranks and
runs NMS in numpy.

torchvision is required (the ``vision`` extra): the IoU, focal and GIoU losses and the NMS kernel
are its own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...core.constraints import NonNegativeFloat, PositiveFloat, PositiveInt, Probability
from ...core.registries import register_head
from ..base import Head
from ..boxes import clip_to_image, decode_deltas, encode_deltas, load_torchvision_ops
from .dense import DenseDetectionHead, DenseNet, class_targets, conv_tower, level_points, ranked_detections, thresholded

__all__ = [
    "RetinaNetHead",
    "RetinaNetNet",
    "base_anchors",
    "level_anchors",
    "retinanet_decode",
    "retinanet_outputs",
    "retinanet_postprocess",
    "retinanet_targets",
]

IGNORED = -1
"""The label of an anchor between ``bg_iou`` and ``fg_iou``: neither trained as an object nor as background."""


def _torchvision_ops() -> Any:
    """``torchvision.ops`` (one clear error naming the extra when torchvision is missing)."""
    load_torchvision_ops()
    import torchvision.ops as ops

    return ops


def base_anchors(stride: int, anchor_scale: float, octave_scales: int, aspect_ratios: list[float]) -> torch.Tensor:
    """The anchors of one location at the origin, ``[A, 4]`` x1y1x2y2: ratio-major, then scale."""
    sizes = torch.tensor([anchor_scale * stride * 2.0 ** (k / octave_scales) for k in range(octave_scales)],
                         dtype=torch.float64)  # fmt: skip
    ratios = torch.tensor(aspect_ratios, dtype=torch.float64)
    heights = (ratios.sqrt()[:, None] * sizes[None, :]).reshape(-1)
    widths = (sizes[None, :] / ratios.sqrt()[:, None]).reshape(-1)
    return (torch.stack([-widths, -heights, widths, heights], dim=1) / 2).float()


def level_anchors(
    sizes: list[list[int]], strides: list[int], cell_anchors: list[torch.Tensor], dtype: torch.dtype,
    device: torch.device,
) -> torch.Tensor:  # fmt: skip
    """Every anchor of the given levels, finest first: ``[Σ H·W·A, 4]``, location-major (row-major
    over each map), each location's ``A`` anchors in :func:`base_anchors`' order, centred on
    ``((j + ½)·s, (i + ½)·s)``. No data-dependent shape: traces with free map sizes."""
    anchors: list[torch.Tensor] = []
    for i in range(len(sizes)):
        centres = level_points([sizes[i]], [strides[i]], dtype, device).repeat(1, 2)  # [HW, 4]
        cell = cell_anchors[i].to(device=device, dtype=dtype)
        anchors.append((centres[:, None, :] + cell[None, :, :]).reshape(-1, 4))
    return torch.cat(anchors, dim=0)


def retinanet_targets(
    anchors: torch.Tensor,
    boxes: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    fg_iou: float = 0.5,
    bg_iou: float = 0.4,
    low_quality_matches: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RetinaNet's assignment of one image's boxes to anchors (the module doc).

    Args:
        anchors: ``[P, 4]``.
        boxes: ``[G, 4]`` ground-truth boxes.
        labels: ``[G]`` their classes in ``0 … num_classes − 1``.
        num_classes: the background label.
        fg_iou: best IoU from which an anchor is a positive.
        bg_iou: best IoU under which an anchor is background.
        low_quality_matches: each box also claims its best-overlapping anchors.

    Returns:
        ``(labels [P], boxes [P, 4])``: class, ``num_classes`` (background) or :data:`IGNORED`;
        the matched box of each positive (zeros elsewhere).
    """
    num_anchors = anchors.shape[0]
    if boxes.shape[0] == 0:
        return (torch.full((num_anchors,), num_classes, dtype=torch.long, device=anchors.device),
                torch.zeros_like(anchors))  # fmt: skip
    iou = _torchvision_ops().box_iou(boxes, anchors)  # [G, P]
    best, which = iou.max(dim=0)
    assigned = torch.where(best >= fg_iou, labels[which], torch.full_like(which, IGNORED))
    assigned = torch.where(best < bg_iou, torch.full_like(which, num_classes), assigned)
    if low_quality_matches:
        best_per_box = iou.max(dim=1, keepdim=True).values
        claimed = ((iou == best_per_box) & (best_per_box > 0)).any(dim=0)
        assigned = torch.where(claimed, labels[which], assigned)
    positive = (assigned >= 0) & (assigned < num_classes)
    matched = torch.where(positive.unsqueeze(1), boxes[which], torch.zeros_like(anchors))
    return assigned, matched


class RetinaNetNet(DenseNet):
    """The network of :class:`RetinaNetHead`: feature maps → raw per-level maps
    ``[B, A·(num_classes + 4), H_l, W_l]`` (every anchor's class logits, then every anchor's
    deltas). Tensor-list in, tensor-list out: ``torch.jit.script``/``trace`` compile it.

    Args:
        in_dim: channels of each level.
        num_classes: number of classes.
        num_anchors: anchors per location (``A``).
        width: subnet width.
        depth: convolutions per subnet.
        groups: GroupNorm groups; 0: no normalisation (the paper).
        prior_prob: initial foreground probability of every class logit.
    """

    def __init__(
        self, in_dim: list[int], num_classes: int, num_anchors: int, width: int, depth: int, groups: int,
        prior_prob: float,
    ):  # fmt: skip
        super().__init__("retinanet", in_dim, width)
        self.projections = nn.ModuleList(nn.Conv2d(c, width, 1) if self.projected else nn.Identity() for c in in_dim)
        self.cls_tower = conv_tower(self.tower_in, width, depth, groups)
        self.box_tower = conv_tower(self.tower_in, width, depth, groups)
        self.cls_logits = nn.Conv2d(width, num_anchors * num_classes, 3, padding=1)
        self.bbox_pred = nn.Conv2d(width, num_anchors * 4, 3, padding=1)
        self.init_weights([self.cls_tower, self.box_tower, self.cls_logits, self.bbox_pred], self.cls_logits, prior_prob)

    def forward(self, features: list[torch.Tensor]) -> list[torch.Tensor]:
        self.check_levels(features)
        outs: list[torch.Tensor] = []
        for i, projection in enumerate(self.projections):
            x = projection(features[i])
            outs.append(torch.cat([self.cls_logits(self.cls_tower(x)), self.bbox_pred(self.box_tower(x))], dim=1))
        return outs


def _flatten_level(raw: torch.Tensor, num_anchors: int, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One level's raw map ``[B, A·(C + 4), H, W]`` → ``(logits [B, H·W·A, C], deltas [B, H·W·A, 4])``
    in the anchors' order (location-major, then anchor)."""
    b, h, w = raw.shape[0], raw.shape[2], raw.shape[3]
    split = num_anchors * num_classes
    logits = raw[:, :split].reshape(b, num_anchors, num_classes, h, w).permute(0, 3, 4, 1, 2)
    deltas = raw[:, split:].reshape(b, num_anchors, 4, h, w).permute(0, 3, 4, 1, 2)
    return logits.reshape(b, -1, num_classes), deltas.reshape(b, -1, 4)


def retinanet_decode(
    raw: list[torch.Tensor], strides: list[int], cell_anchors: list[torch.Tensor], num_classes: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """Every anchor's box (unclipped), class probabilities and level index from the raw maps,
    levels finest first: ``(boxes [B, P, 4], probabilities [B, P, C], level [B, P])``. No
    thresholds and no data-dependent shapes: traces and exports to ONNX whole."""
    num_anchors = cell_anchors[0].shape[0]
    all_boxes: list[torch.Tensor] = []
    all_probs: list[torch.Tensor] = []
    all_levels: list[torch.Tensor] = []
    for n in range(len(raw)):
        level = raw[n]
        logits, deltas = _flatten_level(level, num_anchors, num_classes)
        anchors = level_anchors([[level.shape[2], level.shape[3]]], [strides[n]], [cell_anchors[n]], deltas.dtype,
                                deltas.device)  # fmt: skip
        all_boxes.append(decode_deltas(anchors.unsqueeze(0), deltas))
        all_probs.append(torch.sigmoid(logits))
        all_levels.append(torch.full_like(logits[:, :, 0], float(n)))
    return torch.cat(all_boxes, dim=1), torch.cat(all_probs, dim=1), torch.cat(all_levels, dim=1)


def retinanet_outputs(
    raw: list[torch.Tensor], strides: list[int], cell_anchors: list[torch.Tensor], num_classes: int
) -> torch.Tensor:
    """What an exported RetinaNet returns: ``[B, P, C + 5]`` with columns ``x1, y1, x2, y2``
    (unclipped), ``p_0 … p_{C−1}``, ``level`` — :func:`retinanet_decode` as one tensor."""
    boxes, probs, levels = retinanet_decode(raw, strides, cell_anchors, num_classes)
    return torch.cat([boxes, probs, levels.unsqueeze(2)], dim=2)


def retinanet_postprocess(
    raw: list[torch.Tensor],
    strides: list[int],
    cell_anchors: list[torch.Tensor],
    num_classes: int,
    image_sizes: torch.Tensor,
    score_threshold: float = 0.05,
    pre_nms_topk: int = 1000,
    nms_threshold: float = 0.5,
    max_detections: int = 100,
) -> torch.Tensor:
    """Detections ``[M, 7]`` (``batch_index, x1, y1, x2, y2, score, label``) from the raw maps
    (RetinaNet inference; the module doc)."""
    level_boxes: list[torch.Tensor] = []
    level_ranking: list[torch.Tensor] = []
    for n in range(len(raw)):
        boxes, prob, _ = retinanet_decode([raw[n].detach().float()], [strides[n]], [cell_anchors[n]], num_classes)
        level_boxes.append(clip_to_image(boxes, image_sizes.unsqueeze(1)))
        level_ranking.append(thresholded(prob, score_threshold, prob))
    return ranked_detections(level_boxes, level_ranking, pre_nms_topk, nms_threshold, max_detections, False)


@register_head("retinanet")
class RetinaNetHead(DenseDetectionHead, Head):
    """RetinaNet detection head (Lin et al., 2017): anchors, focal loss, shared subnets; batch
    dict in, batch dict out (see the module doc for every key and rule).

    Not scriptable by ``torch.jit.script`` as a whole: it is a ``dict_io`` part (the batch dict,
    with its list of per-image targets, in and out), which TorchScript cannot type. Its
    convolutional ``net`` scripts; :func:`retinanet_outputs` traces and exports to ONNX.

    Args:
        in_dim: channels of each input level, finest first (wired by the builder).
        num_classes: number of object classes (wired by the builder; no background class).
        strides: stride of each level in input pixels; None: 8, 16, 32, … (P3 onward).
        feat_channels: subnet width; None: the first level's channels.
        tower_depth: 3×3 conv → [GroupNorm] → ReLU blocks in each subnet (the paper: 4).
        norm_groups: GroupNorm groups in the subnets (gcd(norm_groups, width) are used); 0: none
            (the paper; torchvision's v2 uses 32).
        anchor_scale: anchor size in strides (the paper: 4 — a 32 px anchor on P3).
        octave_scales: anchor sizes per octave (the paper: 3 — 2^0, 2^⅓, 2^⅔).
        aspect_ratios: anchor height/width ratios (the paper: 0.5, 1, 2).
        fg_iou: IoU from which an anchor is a positive (0.5).
        bg_iou: IoU under which an anchor is background (0.4); in between: ignored.
        low_quality_matches: each box also claims its best-overlapping anchors.
        prior_prob: initial foreground probability of the classification logits.
        focal_alpha: focal-loss weight of positives.
        focal_gamma: focal-loss focusing exponent.
        box_loss: 'l1' on the deltas (torchvision), 'smooth_l1' (Detectron) or 'giou' on the decoded boxes.
        smooth_l1_beta: the smooth L1's quadratic zone (Detectron: 1/9).
        score_threshold: minimum class probability of a detection candidate.
        pre_nms_topk: candidates kept per level and image before NMS.
        nms_threshold: IoU above which class-aware NMS drops the lower-scored box (0.5).
        max_detections: detections kept per image.
    """

    out_dim_rule = "A × (num_classes + 4) channels per level (A anchors: class logits, then box deltas)"
    head_name = "retinanet"

    def __init__(
        self,
        in_dim: list[int],
        num_classes: int,
        strides: Optional[list[PositiveInt]] = None,
        feat_channels: Optional[PositiveInt] = None,
        tower_depth: PositiveInt = 4,
        norm_groups: int = 0,
        anchor_scale: PositiveFloat = 4.0,
        octave_scales: PositiveInt = 3,
        aspect_ratios: Sequence[PositiveFloat] = (0.5, 1.0, 2.0),
        fg_iou: Probability = 0.5,
        bg_iou: Probability = 0.4,
        low_quality_matches: bool = True,
        prior_prob: Probability = 0.01,
        focal_alpha: Probability = 0.25,
        focal_gamma: NonNegativeFloat = 2.0,
        box_loss: Literal["l1", "smooth_l1", "giou"] = "l1",
        smooth_l1_beta: NonNegativeFloat = 1.0 / 9.0,
        score_threshold: Probability = 0.05,
        pre_nms_topk: PositiveInt = 1000,
        nms_threshold: Probability = 0.5,
        max_detections: PositiveInt = 100,
    ):
        super().__init__()
        _torchvision_ops()  # one clear error now, not at the first step
        strides = self.level_strides(in_dim, strides)
        self.check_prior(prior_prob)
        if bg_iou > fg_iou:
            raise ValueError(f"retinanet: bg_iou ({bg_iou}) must not exceed fg_iou ({fg_iou}): an anchor would be "
                             "both an object and background")  # fmt: skip
        if norm_groups < 0:
            raise ValueError(f"retinanet: norm_groups must be 0 (no normalisation) or positive, got {norm_groups}")
        ratios = [float(r) for r in aspect_ratios]
        if not ratios:
            raise ValueError("retinanet: aspect_ratios needs at least one ratio")
        width = int(feat_channels) if feat_channels is not None else int(in_dim[0])
        self.cell_anchors = [base_anchors(s, float(anchor_scale), int(octave_scales), ratios) for s in strides]
        self.num_anchors = len(ratios) * int(octave_scales)
        groups = math.gcd(norm_groups, width) if norm_groups else 0
        self.net = RetinaNetNet([int(c) for c in in_dim], num_classes, self.num_anchors, width, tower_depth, groups,
                                prior_prob)  # fmt: skip
        self.keep_settings(num_classes, strides, focal_alpha, focal_gamma, score_threshold, pre_nms_topk, nms_threshold,
                           max_detections)  # fmt: skip
        self.fg_iou, self.bg_iou, self.low_quality_matches = float(fg_iou), float(bg_iou), bool(low_quality_matches)
        self.box_loss_kind, self.smooth_l1_beta = box_loss, float(smooth_l1_beta)
        self.out_dim = [self.num_anchors * (num_classes + 4)] * len(strides)

    # ------------------------------------------------------------- inference
    def predict(self, raw: list[torch.Tensor], image_sizes: torch.Tensor) -> torch.Tensor:
        """``dt_bboxes`` ``[M, 7]`` from raw maps: :func:`retinanet_postprocess` with this head's settings."""
        return retinanet_postprocess(raw, self.strides, self.cell_anchors, self.num_classes, image_sizes,
                                     self.score_threshold, self.pre_nms_topk, self.nms_threshold,
                                     self.max_detections)  # fmt: skip

    # ----------------------------------------------------------------- export
    def export_outputs(self, batch: Mapping[str, Any]) -> torch.Tensor:
        """The batch's feature maps → :func:`retinanet_outputs` ``[B, P, num_classes + 5]``; threshold,
        top-k and NMS are left to whoever runs the artifact (:meth:`export_settings`)."""
        return retinanet_outputs(self.net(self._input_maps(batch)), self.strides, self.cell_anchors, self.num_classes)

    # --------------------------------------------------------------- training
    def assign(
        self, sizes: list[list[int]], targets: Sequence[Mapping[str, Any]], dtype: torch.dtype, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Targets of a batch: ``(anchors [P, 4], labels [B, P], boxes [B, P, 4])`` for maps of
        ``sizes``; label ``num_classes`` is background, :data:`IGNORED` no loss."""
        anchors = level_anchors(sizes, self.strides, self.cell_anchors, dtype, device)
        labels, boxes = self.assign_each(
            targets,
            dtype,
            device,
            lambda gt_boxes, gt_labels: retinanet_targets(
                anchors, gt_boxes, gt_labels, self.num_classes, self.fg_iou, self.bg_iou, self.low_quality_matches
            ),
        )
        return anchors, labels, boxes

    def losses(self, raw: list[torch.Tensor], targets: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        """``cls_loss`` and ``box_loss`` of raw maps against a batch's targets."""
        sizes = self.map_sizes(raw, targets)
        ops = _torchvision_ops()
        c = self.num_classes
        flat = [_flatten_level(r.float(), self.num_anchors, c) for r in raw]  # float32 under mixed precision too
        logits = torch.cat([f[0] for f in flat], dim=1)
        deltas = torch.cat([f[1] for f in flat], dim=1)
        anchors, labels, boxes = self.assign(sizes, targets, logits.dtype, logits.device)
        positive = (labels >= 0) & (labels < c)
        num_pos = positive.sum().clamp(min=1).to(logits.dtype)
        counted = labels != IGNORED
        onehot = class_targets(labels.clamp(min=0), c, logits.dtype)
        cls_loss = ops.sigmoid_focal_loss(logits[counted], onehot[counted], self.focal_alpha, self.focal_gamma,
                                          reduction="sum") / num_pos  # fmt: skip
        image, anchor = positive.nonzero(as_tuple=True)  # found once, read by index (see FCOSHead.losses)
        predicted = deltas[image, anchor]
        if predicted.shape[0] == 0:  # nothing to regress: zero, but still part of the graph
            return {"cls_loss": cls_loss, "box_loss": deltas.sum() * 0}
        pos_anchors = anchors[anchor]
        gt = boxes[image, anchor]
        if self.box_loss_kind == "giou":
            box_loss = ops.generalized_box_iou_loss(decode_deltas(pos_anchors, predicted), gt, reduction="sum")
        elif self.box_loss_kind == "smooth_l1":
            box_loss = F.smooth_l1_loss(predicted, encode_deltas(pos_anchors, gt), beta=self.smooth_l1_beta,
                                        reduction="sum")  # fmt: skip
        else:
            box_loss = F.l1_loss(predicted, encode_deltas(pos_anchors, gt), reduction="sum")
        return {"cls_loss": cls_loss, "box_loss": box_loss / num_pos}
