"""``fcos`` — an anchor-free one-stage detection head of the FCOS family (Tian et al., "FCOS:
Fully Convolutional One-Stage Object Detection", ICCV 2019).

What it follows. The network, the targets and the losses are FCOS with the improvements
its authors adopted after the paper (the ``tianzhi0549/FCOS`` repository's ``fcos_imprv``
settings, which are also mmdetection's ``FCOSHead`` with ``norm_on_bbox``,
``centerness_on_reg``, ``center_sampling`` and GIoU):

* **Towers.** One classification and one regression tower of ``tower_depth`` × (3×3 conv →
  GroupNorm → ReLU), *shared by every level*; 3×3 predictors for ``num_classes`` logits,
  4 distances and 1 quality logit (on the regression tower, ``quality_on_reg``). Each level
  has a learnable scale ``s_l`` (init 1): distances are ``ReLU(s_l · conv) · stride_l``
  pixels. Initialisation as FCOS: tower and predictor weights N(0, 0.01), zero biases, the
  classification bias ``−log((1 − π)/π)`` with the prior ``π = prior_prob`` (0.01).
* **Locations.** Level ``l``'s location ``(i, j)`` is the pixel ``((j + ½)·s, (i + ½)·s)``
  (FCOS's ``⌊s/2⌋ + j·s`` for even strides).
* **Targets** (:func:`fcos_targets`). A location is a candidate for a box when it lies in
  the box's *centre region* — the square of half-side ``center_radius × stride`` around the
  box centre, cut to the box (centre sampling; ``center_radius = 0`` uses the whole box, the
  paper's rule) — and the largest of its four distances to the box's sides lies in its
  level's range (``regress_ranges``: FCOS's 0, 64, 128, 256, 512, ∞ for P3–P7, in general
  ``8 × stride``). Of several candidate boxes the smallest by area wins; none: background.
* **Losses**, written UP-style as separate batch keys the model sums: ``cls_loss`` — sigmoid
  focal loss (α 0.25, γ 2) over all locations / #positives; ``box_loss`` — GIoU loss over
  positives, weighted by the centerness target and divided by the sum of those weights (FCOS;
  with ``quality="iou"``: unweighted, / #positives); ``quality_loss`` — BCE of the quality
  logit against the centerness target ``sqrt(min(l,r)/max(l,r) · min(t,b)/max(t,b))`` or,
  with ``quality="iou"``, against the IoU of the (detached) predicted box with its ground
  truth (IoU-aware quality, as in IoU-aware RetinaNet/VFNet), / #positives. #positives is
  clamped at 1, as FCOS does. Crowd boxes (``iscrowd`` in a target) are dropped before
  assignment, as mmdetection does with COCO's crowd regions (``gt_bboxes_ignore``, unused by
  FCOS).
* **Inference** (:func:`fcos_postprocess`). Per level and image, locations whose class
  probability exceeds ``score_threshold`` (0.05) are ranked by probability × quality and the
  best ``pre_nms_topk`` (1000) kept; their boxes are decoded and clipped to the image, the
  score is ``sqrt(probability × quality)`` (the FCOS repository's final score) and
  class-aware NMS (IoU ``nms_threshold``, FCOS's 0.6) runs per image, keeping at most
  ``max_detections`` (100).

The batch. The head is ``dict_io``: it reads its feature maps from ``batch["embedding"]``
(what the model hands the head) or else ``batch["features"]`` (United Perception's key), and
``targets`` (a list of B dicts with ``boxes`` float [N, 4] x1y1x2y2 in input pixels and
``labels`` long [N] in 0…C−1), ``image_sizes`` long [B, 2] (h, w of each unpadded image)
and ``input`` (the padded images; used to check the strides) when present. It writes:

* ``logits`` — the raw per-level maps ``[B, num_classes + 5, H_l, W_l]``: class logits,
  (left, top, right, bottom) distances in pixels, quality logit (its ``out_dim``);
* ``cls_loss``, ``box_loss``, ``quality_loss`` — whenever ``targets`` is present (training,
  and evaluation so validation loss works);
* ``dt_bboxes`` — in eval mode: one ``[M, 7]`` tensor of ``batch_index, x1, y1, x2, y2,
  score, label`` (UP's convention) in input pixels.

Export. The head splits into three pieces so a detector can be exported up to any of them:
:attr:`FCOSHead.net` (feature maps → raw maps) is a plain module that ``torch.jit.script``,
``torch.jit.trace`` and the ONNX exporter compile; :func:`fcos_decode` (raw maps → every
location's box, class probabilities and quality) has no data-dependent shapes, so it traces
and exports to ONNX as well (tested: ONNX Runtime equals eager within 1e-4 px); and
:func:`fcos_postprocess` (threshold, per-level top-k, class-aware NMS) is
``torch.jit.script``-able (once torchvision is imported: its NMS kernel) but not
ONNX-exportable — **NMS runs there**, a data-dependent loop
(:func:`~modforge.components.boxes.batched_nms`, torchvision's kernel). The dict-in/dict-out ``forward`` is
neither scriptable nor traceable (a batch dict of mixed values). ``modforge export`` ends the
graph at :meth:`FCOSHead.export_outputs` (:func:`fcos_outputs`: decoded boxes, probabilities,
quality and level of every location, one tensor) and records :meth:`FCOSHead.export_settings`;
``modforge predict`` clips, thresholds, ranks and runs NMS after the runtime, in numpy.
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
from ..boxes import box_area, box_iou, decode_ltrb, encode_ltrb, load_torchvision_ops
from ..losses.detection import giou_loss, quality_bce_loss, sigmoid_focal_loss
from .dense import DenseDetectionHead, DenseNet, class_targets, conv_tower, level_points, ranked_detections, thresholded

__all__ = ["FCOSHead", "FCOSNet", "fcos_decode", "fcos_outputs", "fcos_postprocess", "fcos_targets", "level_points"]

INF = 1e8
"""The upper end of the last level's range (FCOS's ``INF``)."""


def fcos_targets(
    points: torch.Tensor,
    point_strides: torch.Tensor,
    point_ranges: torch.Tensor,
    boxes: torch.Tensor,
    labels: torch.Tensor,
    num_classes: int,
    center_radius: float = 1.5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """FCOS's assignment of one image's boxes to locations (mmdetection's
    ``FCOSHead._get_target_single``), vectorised over locations × boxes.

    Args:
        points: ``[P, 2]`` location centres ``(x, y)``.
        point_strides: ``[P]`` stride of each location's level.
        point_ranges: ``[P, 2]`` the ``(low, high)`` range of the largest side distance
            that the location's level regresses.
        boxes: ``[N, 4]`` x1y1x2y2 (N may be 0).
        labels: ``[N]`` classes in ``0…num_classes−1``.
        num_classes: the background label.
        center_radius: half-side of the centre region in strides; 0 uses the whole box.

    Returns:
        ``(labels [P], boxes [P, 4])``: each location's class (``num_classes`` for
        background) and the box it regresses (zeros for background).
    """
    num_points, num_boxes = points.shape[0], boxes.shape[0]
    if num_boxes == 0:
        return (
            torch.full((num_points,), num_classes, dtype=torch.long, device=points.device),
            points.new_zeros(num_points, 4),
        )
    xs, ys = points[:, 0:1], points[:, 1:2]  # [P, 1] against [1, N]
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    distances = torch.stack([xs - x1, ys - y1, x2 - xs, y2 - ys], dim=-1)  # [P, N, 4]
    if center_radius > 0:
        reach = point_strides.to(points.dtype).unsqueeze(1) * center_radius  # [P, 1]
        cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
        region = torch.stack(
            [
                xs - torch.maximum(cx - reach, x1),
                ys - torch.maximum(cy - reach, y1),
                torch.minimum(cx + reach, x2) - xs,
                torch.minimum(cy + reach, y2) - ys,
            ],
            dim=-1,
        )
        inside = region.min(dim=-1).values > 0
    else:
        inside = distances.min(dim=-1).values > 0
    largest = distances.max(dim=-1).values
    in_range = (largest >= point_ranges[:, 0:1]) & (largest <= point_ranges[:, 1:2])
    areas = box_area(boxes).unsqueeze(0).expand(num_points, num_boxes)
    areas = torch.where(inside & in_range, areas, torch.full_like(areas, math.inf))
    smallest, which = areas.min(dim=1)
    background = smallest == math.inf
    assigned = torch.where(background, torch.full_like(which, num_classes), labels[which])
    regressed = torch.where(background.unsqueeze(1), torch.zeros_like(boxes[which]), boxes[which])
    return assigned, regressed


def fcos_decode(
    raw: list[torch.Tensor], strides: list[int], num_classes: int, image_sizes: Optional[torch.Tensor] = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Every location's box and scores from the raw per-level maps, levels concatenated finest
    first (the locations of :func:`level_points`). No thresholds, no data-dependent shapes:
    ``torch.jit.trace`` and the ONNX exporter take it whole, so an exported detector can end
    here and leave top-k and NMS to :func:`fcos_postprocess` or to the runtime.

    Args:
        raw: per level ``[B, num_classes + 5, H_l, W_l]`` as :class:`FCOSNet` returns.
        strides: each level's stride.
        num_classes: number of classes.
        image_sizes: ``[B, 2]`` (h, w) to clip each image's boxes to; None: no clipping.

    Returns:
        ``(boxes [B, P, 4], class probabilities [B, P, C], quality [B, P])`` — sigmoids of the
        logits; FCOS ranks by probability × quality.
    """
    # the levels' locations side by side first, then one transpose, one decode and one sigmoid of each
    # kind for all of them: an exported graph has a handful of nodes here instead of a set per level
    flat = torch.cat([level.flatten(2) for level in raw], dim=2).transpose(1, 2)  # [B, P, C + 5]
    sizes = [[level.shape[2], level.shape[3]] for level in raw]
    points = level_points(sizes, strides, flat.dtype, flat.device)
    limit = image_sizes.unsqueeze(1) if image_sizes is not None else None
    boxes = decode_ltrb(points.unsqueeze(0), flat[:, :, num_classes : num_classes + 4], limit)
    return boxes, torch.sigmoid(flat[:, :, :num_classes]), torch.sigmoid(flat[:, :, num_classes + 4])


def fcos_outputs(raw: list[torch.Tensor], strides: list[int], num_classes: int) -> torch.Tensor:
    """Every location's decoded outputs as one tensor: what an exported detector returns.

    Columns ``x1, y1, x2, y2`` (the box in input pixels, *not* clipped to the image: the
    unpadded image size is not part of the graph's input, so clipping happens after it),
    ``p_0 … p_{C−1}`` (class probabilities), ``quality`` (sigmoid of the quality logit) and
    ``level`` (the index of the location's level, as a float). Levels finest first, row-major
    within a level, as :func:`fcos_decode`. Clipping these boxes to the image and applying
    :func:`fcos_postprocess`'s rule level by level gives exactly :func:`fcos_postprocess`'s
    detections (``modforge.tasks.detection.predict.fcos_detections`` does it in numpy).

    Traceable and ONNX-exportable with free batch, height and width: no data-dependent shape.

    Args:
        raw: per level ``[B, num_classes + 5, H_l, W_l]`` as :class:`FCOSNet` returns.
        strides: each level's stride.
        num_classes: number of classes.

    Returns:
        ``[B, P, num_classes + 6]``.
    """
    boxes, probs, quality = fcos_decode(raw, strides, num_classes)
    levels: list[torch.Tensor] = []
    for n in range(len(raw)):
        levels.append(torch.full_like(raw[n][:, 0].flatten(1), float(n)))
    return torch.cat([boxes, probs, quality.unsqueeze(2), torch.cat(levels, dim=1).unsqueeze(2)], dim=2)


def fcos_postprocess(
    raw: list[torch.Tensor],
    strides: list[int],
    num_classes: int,
    image_sizes: torch.Tensor,
    score_threshold: float = 0.05,
    pre_nms_topk: int = 1000,
    nms_threshold: float = 0.6,
    max_detections: int = 100,
) -> torch.Tensor:
    """Detections from the raw per-level maps (FCOS inference; see the module doc).

    Args:
        raw: per level ``[B, num_classes + 5, H_l, W_l]`` as :class:`FCOSNet` returns.
        strides: each level's stride.
        num_classes: number of classes.
        image_sizes: ``[B, 2]`` (h, w) to clip each image's boxes to.
        score_threshold: minimum class probability of a candidate.
        pre_nms_topk: candidates kept per level and image, by probability × quality.
        nms_threshold: IoU above which class-aware NMS drops the lower-scored box.
        max_detections: detections kept per image, best first.

    Returns:
        ``[M, 7]``: ``batch_index, x1, y1, x2, y2, score, label`` — images in order, each
        image's detections by decreasing score.
    """
    level_boxes: list[torch.Tensor] = []
    level_ranking: list[torch.Tensor] = []
    for n in range(len(raw)):
        boxes, prob, quality = fcos_decode([raw[n].detach().float()], [strides[n]], num_classes, image_sizes)
        level_boxes.append(boxes)
        level_ranking.append(thresholded(prob, score_threshold, prob * quality.unsqueeze(2)))
    return ranked_detections(level_boxes, level_ranking, pre_nms_topk, nms_threshold, max_detections, True)


class _Level(nn.Module):
    """One level's own parts: a 1×1 projection to the tower width (only when the levels'
    widths differ), its learnable regression scale and its stride."""

    def __init__(self, in_channels: int, width: int, project: bool, stride: int):
        super().__init__()
        self.project = nn.Conv2d(in_channels, width, 1) if project else nn.Identity()
        self.scale = nn.Parameter(torch.ones(()))
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.project(x)


class FCOSNet(DenseNet):
    """The network of :class:`FCOSHead`: feature maps → raw per-level maps
    ``[B, num_classes + 5, H_l, W_l]`` (class logits, distances in pixels, quality logit).
    Tensor-list in, tensor-list out: ``torch.jit.script``/``trace`` compile it.

    Args:
        in_dim: channels of each level.
        num_classes: number of classes.
        strides: stride of each level.
        width: tower width.
        depth: convolutions per tower.
        groups: GroupNorm groups.
        prior_prob: initial foreground probability of every class logit.
        quality_on_reg: the quality predictor reads the regression tower (else classification).
    """

    def __init__(
        self,
        in_dim: list[int],
        num_classes: int,
        strides: list[int],
        width: int,
        depth: int,
        groups: int,
        prior_prob: float,
        quality_on_reg: bool,
    ):
        super().__init__("fcos", in_dim, width)
        self.levels = nn.ModuleList(_Level(c, width, self.projected, s) for c, s in zip(in_dim, strides, strict=True))
        self.cls_tower = conv_tower(self.tower_in, width, depth, groups)
        self.reg_tower = conv_tower(self.tower_in, width, depth, groups)
        self.cls_logits = nn.Conv2d(width, num_classes, 3, padding=1)
        self.bbox_pred = nn.Conv2d(width, 4, 3, padding=1)
        self.quality = nn.Conv2d(width, 1, 3, padding=1)
        self.quality_on_reg = quality_on_reg
        self.init_weights([self.cls_tower, self.reg_tower, self.cls_logits, self.bbox_pred, self.quality], self.cls_logits,
                          prior_prob)  # fmt: skip

    def forward(self, features: list[torch.Tensor]) -> list[torch.Tensor]:
        self.check_levels(features)
        outs: list[torch.Tensor] = []
        for i, level in enumerate(self.levels):
            x = level(features[i])
            cls = self.cls_tower(x)
            reg = self.reg_tower(x)
            distances = F.relu(self.bbox_pred(reg) * level.scale) * level.stride
            quality = self.quality(reg if self.quality_on_reg else cls)
            outs.append(torch.cat([self.cls_logits(cls), distances, quality], dim=1))
        return outs


@register_head("fcos")
class FCOSHead(DenseDetectionHead, Head):
    """FCOS detection head (Tian et al., 2019) with centre sampling, GIoU and a centerness or
    IoU quality branch; batch dict in, batch dict out (see the module doc for every key).

    Not scriptable by ``torch.jit.script`` as a whole: it is a ``dict_io`` part (the batch
    dict, with its list of per-image targets, in and out), which TorchScript cannot type.
    Its convolutional ``net`` and :func:`fcos_postprocess` script; :func:`fcos_decode` traces.

    Args:
        in_dim: channels of each input level, finest first (wired by the builder; all equal
            after ``fpn``; otherwise a 1×1 convolution per level brings each to the tower width).
        num_classes: number of object classes (wired by the builder; no background class).
        strides: stride of each level in input pixels; None: 8, 16, 32, … (P3 onward), one per level.
        feat_channels: tower width; None: the first level's channels (256 after a standard FPN).
        tower_depth: 3×3 conv → GroupNorm → ReLU blocks in each tower (FCOS: 4).
        norm_groups: GroupNorm groups (FCOS: 32); gcd(norm_groups, tower width) are used.
        prior_prob: initial foreground probability of the classification logits (focal-loss prior).
        regress_ranges: the L−1 boundaries between consecutive levels' ranges of the largest
            location-to-side distance; None: 8 × stride of each level but the last (FCOS's 64, 128, 256, 512).
        center_radius: centre-sampling radius in strides (FCOS: 1.5); 0 turns centre sampling off.
        quality: 'centerness' (FCOS) or 'iou' (IoU of the predicted box with its ground truth).
        quality_on_reg: predict quality from the regression tower (FCOS's improvement) instead of the classification one.
        focal_alpha: focal-loss weight of positives.
        focal_gamma: focal-loss focusing exponent.
        score_threshold: minimum class probability of a detection candidate.
        pre_nms_topk: candidates kept per level and image before NMS.
        nms_threshold: IoU above which class-aware NMS drops the lower-scored box (FCOS: 0.6).
        max_detections: detections kept per image.
    """

    out_dim_rule = "num_classes + 5 channels per level (class logits, 4 distances, quality logit)"
    head_name = "fcos"
    export_columns = ("quality", "level")
    score_rule = "sqrt(probability * quality)"

    def __init__(
        self,
        in_dim: list[int],
        num_classes: int,
        strides: Optional[list[PositiveInt]] = None,
        feat_channels: Optional[PositiveInt] = None,
        tower_depth: PositiveInt = 4,
        norm_groups: PositiveInt = 32,
        prior_prob: Probability = 0.01,
        regress_ranges: Optional[list[PositiveFloat]] = None,
        center_radius: NonNegativeFloat = 1.5,
        quality: Literal["centerness", "iou"] = "centerness",
        quality_on_reg: bool = True,
        focal_alpha: Probability = 0.25,
        focal_gamma: NonNegativeFloat = 2.0,
        score_threshold: Probability = 0.05,
        pre_nms_topk: PositiveInt = 1000,
        nms_threshold: Probability = 0.6,
        max_detections: PositiveInt = 100,
    ):
        super().__init__()
        load_torchvision_ops()  # its NMS kernel: a missing torchvision stops the run now, not at validation
        strides = self.level_strides(in_dim, strides)
        levels = len(strides)
        if regress_ranges is None:
            regress_ranges = [8.0 * s for s in strides[:-1]]
        if len(regress_ranges) != levels - 1 or any(
            b >= a for a, b in zip(regress_ranges[1:], regress_ranges[:-1], strict=True)
        ):
            raise ValueError(
                f"fcos: regress_ranges must be {levels - 1} increasing boundaries (one between each pair of levels), "
                f"got {regress_ranges}"
            )
        self.check_prior(prior_prob)
        width = int(feat_channels) if feat_channels is not None else int(in_dim[0])
        self.net = FCOSNet(
            [int(c) for c in in_dim],
            num_classes,
            strides,
            width,
            tower_depth,
            math.gcd(norm_groups, width),
            prior_prob,
            quality_on_reg,
        )
        self.keep_settings(num_classes, strides, focal_alpha, focal_gamma, score_threshold, pre_nms_topk, nms_threshold,
                           max_detections)  # fmt: skip
        bounds = [0.0, *[float(b) for b in regress_ranges], INF]
        self.regress_ranges = [(bounds[i], bounds[i + 1]) for i in range(levels)]
        self.center_radius, self.quality_kind = float(center_radius), quality
        self.out_dim = [num_classes + 5] * levels

    # ------------------------------------------------------------- inference
    def predict(self, raw: list[torch.Tensor], image_sizes: torch.Tensor) -> torch.Tensor:
        """``dt_bboxes`` ``[M, 7]`` from raw maps: :func:`fcos_postprocess` with this head's settings."""
        return fcos_postprocess(
            raw,
            self.strides,
            self.num_classes,
            image_sizes,
            self.score_threshold,
            self.pre_nms_topk,
            self.nms_threshold,
            self.max_detections,
        )

    # ----------------------------------------------------------------- export
    def export_outputs(self, batch: Mapping[str, Any]) -> torch.Tensor:
        """What an exported detector computes after the model's other stages: the batch's feature
        maps (``embedding`` or ``features``) → :func:`fcos_outputs` ``[B, P, num_classes + 6]``.
        Threshold, top-k and NMS are left to whoever runs the artifact (see :meth:`export_settings`)."""
        return fcos_outputs(self.net(self._input_maps(batch)), self.strides, self.num_classes)

    # --------------------------------------------------------------- training
    def assign(
        self, sizes: list[list[int]], targets: Sequence[Mapping[str, Any]], dtype: torch.dtype, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Targets of a batch: ``(points [P, 2], labels [B, P], boxes [B, P, 4])`` for maps of
        ``sizes`` (h, w per level); label ``num_classes`` is background."""
        points = level_points(sizes, self.strides, dtype, device)
        counts = [h * w for h, w in sizes]
        # each location's stride and range, filled on the device: no copy from the host, and no
        # ``repeat_interleave`` by a device tensor (it reads the total back: a wait for the device)
        strides = torch.cat([torch.full((n,), s, dtype=torch.long, device=device)
                             for n, s in zip(counts, self.strides, strict=True)])  # fmt: skip
        ranges = torch.cat([torch.stack([torch.full((n,), lo, dtype=dtype, device=device),
                                         torch.full((n,), hi, dtype=dtype, device=device)], dim=1)
                            for n, (lo, hi) in zip(counts, self.regress_ranges, strict=True)])  # fmt: skip
        labels, boxes = self.assign_each(
            targets,
            dtype,
            device,
            lambda gt_boxes, gt_labels: fcos_targets(
                points, strides, ranges, gt_boxes, gt_labels, self.num_classes, self.center_radius
            ),
        )
        return points, labels, boxes

    def losses(self, raw: list[torch.Tensor], targets: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        """``cls_loss``, ``box_loss`` and ``quality_loss`` of raw maps against a batch's targets."""
        sizes = self.map_sizes(raw, targets)
        c = self.num_classes
        # [B, P, C + 5], in float32 under mixed precision too (as mmdetection: focal and IoU terms need the range)
        flat = torch.cat([r.flatten(2).transpose(1, 2) for r in raw], dim=1).float()
        points, labels, boxes = self.assign(sizes, targets, flat.dtype, flat.device)
        positive = labels < c
        num_pos = positive.sum().clamp(min=1).to(flat.dtype)
        cls_loss = sigmoid_focal_loss(flat[..., :c], class_targets(labels, c, flat.dtype), self.focal_alpha,
                                      self.focal_gamma) / num_pos  # fmt: skip
        # the positives' (image, location) pairs found once — the one wait for the device a step — and read by
        # index below (a boolean mask would find them again at every use, and in the backward pass)
        image, location = positive.nonzero(as_tuple=True)
        chosen = flat[image, location]  # [N, C + 5]
        distances, quality = chosen[:, c : c + 4], chosen[:, c + 4]
        if distances.shape[0] == 0:  # nothing to regress: zero, but still part of the graph
            zero = flat[..., c:].sum() * 0
            return {"cls_loss": cls_loss, "box_loss": zero, "quality_loss": zero}
        pos_points = points[location]
        gt = boxes[image, location]
        predicted = decode_ltrb(pos_points, distances)
        if self.quality_kind == "centerness":
            ltrb = encode_ltrb(pos_points, gt)
            lr, tb = ltrb[:, 0::2], ltrb[:, 1::2]
            target_quality = torch.sqrt(
                (lr.min(dim=1).values / lr.max(dim=1).values) * (tb.min(dim=1).values / tb.max(dim=1).values)
            )
            box_loss = giou_loss(predicted, gt, weight=target_quality) / target_quality.sum().clamp(min=1e-6)
        else:
            target_quality = box_iou(predicted.detach(), gt, aligned=True)
            box_loss = giou_loss(predicted, gt) / num_pos
        quality_loss = quality_bce_loss(quality, target_quality) / num_pos
        return {"cls_loss": cls_loss, "box_loss": box_loss, "quality_loss": quality_loss}
