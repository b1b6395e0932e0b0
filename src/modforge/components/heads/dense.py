"""What the dense detection heads (``fcos``, ``retinanet``) share: the batch they read and write
(:class:`DenseDetectionHead`), their convolution towers, and the last step of inference — the
candidates of every level become each image's detections by class-aware NMS.

Each head ranks its candidates in its own way (FCOS by probability × quality, RetinaNet by the
class probability), keeps the best ``pre_nms_topk`` of each level and image, and hands them here
as flat lists with the image each came from; :func:`detections_per_image` runs
:func:`~modforge.components.boxes.batched_nms` image by image and writes United Perception's
``dt_bboxes`` rows. TorchScript compiles it (once torchvision is imported: the NMS kernel).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import torch
import torch.nn as nn

from ..boxes import batched_nms
from ..layouts import Layout

__all__ = ["DenseDetectionHead", "conv_tower", "detections_per_image", "level_candidates", "prior_bias"]


def conv_tower(in_channels: int, width: int, depth: int, groups: int) -> nn.Sequential:
    """``depth`` × (3×3 conv → GroupNorm(``groups``) → ReLU); ``groups`` 0: 3×3 conv (with bias) → ReLU."""
    layers: list[nn.Module] = []
    for d in range(depth):
        conv = nn.Conv2d(in_channels if d == 0 else width, width, 3, padding=1, bias=groups == 0)
        layers += [conv, nn.GroupNorm(groups, width), nn.ReLU(inplace=True)] if groups else [conv, nn.ReLU(inplace=True)]
    return nn.Sequential(*layers)


def prior_bias(prior_prob: float) -> float:
    """The classification bias whose sigmoid is ``prior_prob`` (RetinaNet's focal-loss prior)."""
    return -math.log((1 - prior_prob) / prior_prob)


class DenseDetectionHead:
    """The batch side of a dense detection head (mixed into an ``nn.Module`` head that defines
    ``net``, ``strides``, ``num_classes``, ``losses(raw, targets)`` and ``predict(raw, sizes)``):
    reads the feature maps, runs the network, writes ``output_key``, the ``*_loss`` keys when the
    batch has ``targets`` and ``dt_bboxes`` in eval mode."""

    head_name = "detection head"
    dict_io = True
    accepts = (Layout.MULTISCALE,)
    produces = Layout.MULTISCALE
    output_key = "logits"

    def forward(self, batch: dict[str, Any]) -> dict[str, Any]:
        features = self._input_maps(batch)
        raw = self.net(features)
        batch[self.output_key] = raw
        targets = batch.get("targets")
        if targets is not None:
            batch.update(self.losses(raw, targets))
        if not self.training:
            batch["dt_bboxes"] = self.predict(raw, self._image_sizes(batch, features))
        return batch

    def level_strides(self, in_dim: Any, strides: Optional[Sequence[int]]) -> list[int]:
        """The stride of each input level: as given (one per level), or 8, 16, 32, … (P3 onward)."""
        if isinstance(in_dim, int) or not in_dim:
            raise ValueError(f"{self.head_name} needs a list of channel counts (a multiscale input), got {in_dim!r}")
        levels = len(in_dim)
        strides = [8 * 2**i for i in range(levels)] if strides is None else [int(s) for s in strides]
        if len(strides) != levels:
            raise ValueError(f"{self.head_name}: {len(strides)} strides {strides} for {levels} input levels; give one "
                             "per level")  # fmt: skip
        return strides

    def target_boxes(
        self, target: Mapping[str, Any], dtype: torch.dtype, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One target's ``(boxes [G, 4], labels [G])`` without its crowd boxes (``iscrowd``; mmdetection
        drops COCO's crowd regions the same way), labels checked against ``num_classes``."""
        boxes = torch.as_tensor(target["boxes"]).to(device=device, dtype=dtype).reshape(-1, 4)
        labels = torch.as_tensor(target["labels"]).to(device=device, dtype=torch.long).reshape(-1)
        crowd = target.get("iscrowd")
        if crowd is not None:
            kept = ~torch.as_tensor(crowd).to(device=device, dtype=torch.bool).reshape(-1)
            boxes, labels = boxes[kept], labels[kept]
        if bool(((labels < 0) | (labels >= self.num_classes)).any()):  # one host sync per image, not two
            raise ValueError(f"{self.head_name}: target labels must be in 0..{self.num_classes - 1}, got "
                             f"{sorted(set(labels.tolist()))}")  # fmt: skip
        return boxes, labels

    def _input_maps(self, batch: Mapping[str, Any]) -> list[torch.Tensor]:
        for key in ("embedding", "features"):
            maps = batch.get(key)
            if maps is not None:
                break
        else:
            raise KeyError(f"{self.head_name} reads its feature maps from batch['embedding'] (set by the model) or "
                           f"batch['features']; the batch has neither (keys: {', '.join(map(str, batch))})")  # fmt: skip
        if isinstance(maps, torch.Tensor) or not isinstance(maps, Sequence):
            raise TypeError(f"{self.head_name} needs a list of feature maps (multiscale), got {type(maps).__name__}")
        image = batch.get("input")
        if isinstance(image, torch.Tensor) and image.dim() == 4:
            height, width = image.shape[-2:]
            for m, stride in zip(maps, self.strides, strict=False):
                if abs(m.shape[-2] - height / stride) >= 1 or abs(m.shape[-1] - width / stride) >= 1:
                    raise ValueError(
                        f"{self.head_name}: a {tuple(m.shape[-2:])} map cannot have stride {stride} on a "
                        f"{height}×{width} input; the strides {self.strides} do not match the maps "
                        f"{[tuple(f.shape[-2:]) for f in maps]}"
                    )
        return list(maps)

    def _image_sizes(self, batch: Mapping[str, Any], features: list[torch.Tensor]) -> torch.Tensor:
        """``image_sizes`` when given, else the padded input's size, else the finest map × stride."""
        device, count = features[0].device, features[0].shape[0]
        sizes = batch.get("image_sizes")
        if sizes is not None:
            return torch.as_tensor(sizes).to(device).reshape(-1, 2)
        image = batch.get("input")
        if isinstance(image, torch.Tensor) and image.dim() == 4:
            height, width = image.shape[-2:]
        else:
            height, width = features[0].shape[-2] * self.strides[0], features[0].shape[-1] * self.strides[0]
        return torch.tensor([[height, width]], device=device).expand(count, 2)


def level_candidates(
    boxes: torch.Tensor, ranking: torch.Tensor, topk: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The best ``topk`` (location, class) candidates of each image of one level, flat.

    Args:
        boxes: ``[B, P, 4]`` every location's (or anchor's) box, clipped to its image.
        ranking: ``[B, P, C]`` the value each (location, class) is ranked by, −1 where the class
            probability did not pass the score threshold (the caller sets it).
        topk: candidates kept per image (at most ``P × C``).

    Returns:
        ``(boxes [N, 4], values [N], labels [N], images [N])`` of the candidates that passed,
        each image's by decreasing value.
    """
    batch, classes = ranking.shape[0], ranking.shape[2]
    k = min(topk, ranking.shape[1] * classes)
    top, index = ranking.flatten(1).topk(k, dim=1)  # [B, k]
    location = torch.div(index, classes, rounding_mode="floor")
    images = torch.arange(batch, device=boxes.device).unsqueeze(1).expand(-1, k)
    valid = top >= 0
    chosen = boxes.gather(1, location.unsqueeze(2).expand(-1, -1, 4))
    return chosen[valid], top[valid], torch.remainder(index, classes)[valid], images[valid]


def detections_per_image(
    level_boxes: list[torch.Tensor],
    level_scores: list[torch.Tensor],
    level_labels: list[torch.Tensor],
    level_images: list[torch.Tensor],
    batch: int,
    nms_threshold: float,
    max_detections: int,
) -> torch.Tensor:
    """``dt_bboxes`` ``[M, 7]`` (``batch_index, x1, y1, x2, y2, score, label``) from every
    level's candidates: class-aware NMS within each image, at most ``max_detections`` per image
    by decreasing score, images in order.

    Args:
        level_boxes: per level, ``[N, 4]`` candidates' boxes (clipped to their image).
        level_scores: per level, ``[N]`` their final scores (what NMS and the output rank by).
        level_labels: per level, ``[N]`` long classes.
        level_images: per level, ``[N]`` long image index of each candidate.
        batch: number of images.
        nms_threshold: IoU above which the lower-scored box of a class is dropped.
        max_detections: detections kept per image.
    """
    boxes, scores = torch.cat(level_boxes), torch.cat(level_scores)
    labels, images = torch.cat(level_labels), torch.cat(level_images)
    rows: list[torch.Tensor] = []
    for i in range(batch):
        mine = torch.nonzero(images == i).reshape(-1)
        keep = mine[batched_nms(boxes[mine], scores[mine], labels[mine], nms_threshold)[:max_detections]]
        rows.append(
            torch.cat(
                [
                    images[keep].unsqueeze(1).to(boxes.dtype),
                    boxes[keep],
                    scores[keep].unsqueeze(1),
                    labels[keep].unsqueeze(1).to(boxes.dtype),
                ],
                dim=1,
            )
        )
    if len(rows) == 0:
        return boxes.new_zeros(0, 7)
    return torch.cat(rows)
