"""The batch side the dense detection heads (``fcos``, ``retinanet``) share: :class:`DenseDetectionHead`.

It reads the feature maps and the targets from the batch and writes the raw maps, the losses and
the detections; it also keeps the settings both heads take (focal loss, inference), checks their
common arguments, assigns a batch's targets image by image and describes the exported outputs.
The network side is ``dense_net.py`` (towers, initialisation, locations), the last step of
inference ``dense_inference.py`` (per-level top-k, class-aware NMS); their names are re-exported
here, where the heads import them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

import torch

from ..layouts import Layout
from .dense_inference import detections_per_image, level_candidates, ranked_detections, thresholded
from .dense_net import DenseNet, conv_tower, level_points, prior_bias

__all__ = [
    "DenseDetectionHead",
    "class_targets",
    "DenseNet",
    "conv_tower",
    "detections_per_image",
    "level_candidates",
    "level_points",
    "prior_bias",
    "ranked_detections",
    "thresholded",
]


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
    export_columns: tuple[str, ...] = ("level",)  # an exported detector's columns after box and class probabilities
    score_rule = "probability"  # how a detection's score follows from them (recorded for ``modforge predict``)

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
        """One target's ``(boxes [G, 4], labels [G])`` on ``device`` without its crowd boxes (``iscrowd``;
        mmdetection drops COCO's crowd regions the same way), labels checked against ``num_classes``.

        The crowd boxes are dropped and the labels checked where the target lies — on the host, as a
        loader hands targets over — and only then is what is kept moved: on a GPU, masking and checking
        after the move would make the host wait for the device three times per image."""
        boxes = torch.as_tensor(target["boxes"]).reshape(-1, 4)
        labels = torch.as_tensor(target["labels"]).reshape(-1)
        crowd = target.get("iscrowd")
        if crowd is not None:
            kept = ~torch.as_tensor(crowd).to(device=labels.device, dtype=torch.bool).reshape(-1)
            boxes, labels = boxes[kept.to(boxes.device)], labels[kept]
        if bool(((labels < 0) | (labels >= self.num_classes)).any()):
            raise ValueError(f"{self.head_name}: target labels must be in 0..{self.num_classes - 1}, got "
                             f"{sorted(set(labels.tolist()))}")  # fmt: skip
        # non-blocking: from pinned memory (a loader with pin_memory pins the targets too) the copy does not wait
        return (boxes.to(device=device, dtype=dtype, non_blocking=True),
                labels.to(device=device, dtype=torch.long, non_blocking=True))  # fmt: skip

    def check_prior(self, prior_prob: float) -> None:
        """The focal-loss prior must be a probability strictly inside (0, 1)."""
        if not 0 < prior_prob < 1:
            raise ValueError(f"{self.head_name}: prior_prob must be strictly between 0 and 1, got {prior_prob}")

    def keep_settings(
        self, num_classes: int, strides: list[int], focal_alpha: float, focal_gamma: float, score_threshold: float,
        pre_nms_topk: int, nms_threshold: float, max_detections: int,
    ) -> None:  # fmt: skip
        """Keep the settings both heads take: classes, strides, the focal loss's and inference's."""
        self.num_classes, self.strides = num_classes, strides
        self.focal_alpha, self.focal_gamma = float(focal_alpha), float(focal_gamma)
        self.score_threshold, self.pre_nms_topk = float(score_threshold), int(pre_nms_topk)
        self.nms_threshold, self.max_detections = float(nms_threshold), int(max_detections)

    def map_sizes(self, raw: list[torch.Tensor], targets: Sequence[Mapping[str, Any]]) -> list[list[int]]:
        """The (h, w) of each level's raw map, once the batch is checked to have one target per image."""
        if len(targets) != raw[0].shape[0]:
            raise ValueError(f"{self.head_name}: {len(targets)} targets for a batch of {raw[0].shape[0]} images")
        return [[int(r.shape[2]), int(r.shape[3])] for r in raw]

    def assign_each(
        self,
        targets: Sequence[Mapping[str, Any]],
        dtype: torch.dtype,
        device: torch.device,
        assign_one: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(labels [B, P], boxes [B, P, 4])``: ``assign_one(boxes, labels)`` of each target's
        :meth:`target_boxes`, stacked."""
        labels, boxes = [], []
        for target in targets:
            assigned, regressed = assign_one(*self.target_boxes(target, dtype, device))
            labels.append(assigned)
            boxes.append(regressed)
        return torch.stack(labels), torch.stack(boxes)

    def export_settings(self) -> dict[str, Any]:
        """How :meth:`export_outputs`' columns become detections: the post-processing rule and this
        head's settings (recorded in an exported artifact's metadata, read by ``modforge predict``)."""
        return {
            "type": self.head_name,
            "num_classes": int(self.num_classes),
            "strides": [int(s) for s in self.strides],
            "columns": ["x1", "y1", "x2", "y2", *[f"p_{k}" for k in range(self.num_classes)], *self.export_columns],
            "score_threshold": self.score_threshold,
            "pre_nms_topk": self.pre_nms_topk,
            "nms_threshold": self.nms_threshold,
            "max_detections": self.max_detections,
            "score": self.score_rule,
        }

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


def class_targets(labels: torch.Tensor, num_classes: int, dtype: torch.dtype) -> torch.Tensor:
    """The focal loss's targets ``[..., num_classes]`` from labels in ``0..num_classes`` (``num_classes``:
    background, a row of zeros). ``F.one_hot`` checks its labels' range on the host — on a GPU, two
    waits for the device every step; these labels come from the assignment, in range by construction."""
    rows = torch.zeros(*labels.shape, num_classes + 1, dtype=dtype, device=labels.device)
    return rows.scatter_(-1, labels.unsqueeze(-1), 1.0)[..., :num_classes]
