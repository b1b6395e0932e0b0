"""Checkpoint formats of published weights for zoo families (see ``model.init``).

* ``aasist_official`` — the authors' ``AASIST.pth`` / ``AASIST-L.pth`` (clovaai/aasist,
  ``models/AASIST.py``) into ``aasist`` / ``aasist_l`` + ``linear``: the files' logits are the
  authors' code's (tests/test_aasist_reference.py).
* ``rawnet2_baseline`` — the ASVspoof 2021 baseline's RawNet2 weights
  (``pre_trained_DF_RawNet2.zip``; asvspoof-challenge/2021 ``LA/Baseline-RawNet2``) into
  ``rawnet2`` + ``linear``.
* ``torchvision_resnet`` — a torchvision ``resnet18``/``resnet34`` ``state_dict`` into
  ``resnet18``/``resnet34`` (``stem: imagenet``) + ``linear``.

The key maps themselves live with their family (:func:`.aasist.official_aasist_state_dict`,
:func:`.rawnet2.reference_state_dict`, :func:`.resnet.torchvision_resnet_state_dict`); this file makes them ``model.init`` formats.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Optional

from ...core.registries import register_checkpoint_format
from ...core.weight_formats import CheckpointFormat, WeightFormatError, tensors_of
from .aasist import official_aasist_state_dict
from .rawnet2 import reference_state_dict as rawnet2_state_dict
from .resnet import torchvision_resnet_state_dict

__all__ = ["BaselineRawNet2", "OfficialAASIST", "TorchvisionResNet"]


def _restaged(state: dict[str, Any], backbone: str, head: Optional[str]) -> dict[str, Any]:
    """Keys under ``parts.backbone.``/``parts.head.`` moved to the model's own stage names."""
    out = {}
    for key, value in state.items():
        if key.startswith("parts.backbone."):
            out[f"parts.{backbone}." + key[len("parts.backbone.") :]] = value
        elif key.startswith("parts.head."):
            if head is not None:
                out[f"parts.{head}." + key[len("parts.head.") :]] = value
        else:
            out[key] = value
    return out


@register_checkpoint_format("aasist_official")
class OfficialAASIST(CheckpointFormat):
    """The authors' released AASIST / AASIST-L weights (clovaai/aasist, ``AASIST.pth``).

    Args:
        backbone: the model's stage holding ``aasist``/``aasist_l``.
        head: the model's ``linear`` head stage (the reference's ``out_layer``), or None to
            leave the reference classifier out (e.g. a new head for other classes).
    """

    def __init__(self, backbone: str = "backbone", head: Optional[str] = "head"):
        self.backbone, self.head = backbone, head

    @classmethod
    def recognises(cls, loaded: Any, path: Path) -> bool:
        return isinstance(loaded, dict) and {"pos_S", "master1", "master2", "out_layer.weight"} <= set(loaded)

    def convert(self, loaded: Any, path: Path) -> dict[str, Any]:
        try:
            state = official_aasist_state_dict(tensors_of(loaded, what=f"the state dict in {path}"))
        except ValueError as exc:
            raise WeightFormatError(f"{path}: {exc}") from None
        return _restaged(state, self.backbone, self.head)


@register_checkpoint_format("rawnet2_baseline")
class BaselineRawNet2(CheckpointFormat):
    """The ASVspoof 2021 baseline's released RawNet2 weights (``pre_trained_DF_RawNet2.pth``).

    Args:
        backbone: the model's ``rawnet2`` stage.
        head: the ``linear`` head stage for the reference's ``fc2_gru``, or None to leave it out.
    """

    def __init__(self, backbone: str = "backbone", head: Optional[str] = "head"):
        self.backbone, self.head = backbone, head

    @classmethod
    def recognises(cls, loaded: Any, path: Path) -> bool:
        return isinstance(loaded, dict) and {"first_bn.weight", "fc1_gru.weight", "fc2_gru.weight"} <= set(loaded)

    def convert(self, loaded: Any, path: Path) -> dict[str, Any]:
        try:
            state = rawnet2_state_dict(tensors_of(loaded, what=f"the state dict in {path}"))
        except ValueError as exc:
            raise WeightFormatError(f"{path}: {exc}") from None
        return _restaged(state, self.backbone, self.head)


@register_checkpoint_format("torchvision_resnet")
class TorchvisionResNet(CheckpointFormat):
    """A torchvision ``resnet18``/``resnet34`` ``state_dict`` (``resnet18-f37072fd.pth`` …)
    into modforge's ``resnet18``/``resnet34`` with ``stem: imagenet`` (+ ``linear`` for ``fc``).

    Args:
        depth: 18 or 34 (None: told from the file's blocks).
        backbone: the model's resnet stage.
        head: the ``linear`` head stage for torchvision's ``fc``, or None to leave ``fc`` out
            (a new head for other classes).
    """

    def __init__(self, depth: Optional[Literal[18, 34]] = None, backbone: str = "backbone",
                 head: Optional[str] = "head"):  # fmt: skip
        self.depth, self.backbone, self.head = depth, backbone, head

    @classmethod
    def recognises(cls, loaded: Any, path: Path) -> bool:
        return isinstance(loaded, dict) and {"conv1.weight", "bn1.running_mean", "layer1.0.conv1.weight",
                                             "fc.weight"} <= set(loaded)  # fmt: skip

    def convert(self, loaded: Any, path: Path) -> dict[str, Any]:
        state = tensors_of(loaded, what=f"the state dict in {path}")
        depth = self.depth or (34 if "layer3.5.conv1.weight" in state else 18)
        try:
            converted = torchvision_resnet_state_dict(state, depth)
        except ValueError as exc:
            raise WeightFormatError(f"{path}: {exc}") from None
        return _restaged(converted, self.backbone, self.head)
