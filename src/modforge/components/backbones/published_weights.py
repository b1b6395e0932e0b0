"""Checkpoint formats of published weights for zoo families (see ``model.init``).

* ``aasist_official`` — the authors' ``AASIST.pth`` / ``AASIST-L.pth`` (clovaai/aasist,
  ``models/AASIST.py``) into ``aasist`` / ``aasist_l`` + ``linear``: the files' logits are the
  authors' code's (tests/test_aasist_reference.py).
* ``rawnet2_baseline`` — the ASVspoof 2021 baseline's RawNet2 weights
  (``pre_trained_DF_RawNet2.zip``; asvspoof-challenge/2021 ``LA/Baseline-RawNet2``) into
  ``rawnet2`` + ``linear``.
* ``torchvision_resnet`` — a torchvision ``resnet18``/``resnet34`` ``state_dict`` into
  ``resnet18``/``resnet34`` (``stem: imagenet``) + ``linear``.
* ``timm`` — a timm model's own ``state_dict`` (``model.safetensors`` / ``pytorch_model.bin``
  from the hub's ``timm/…`` repositories, or ``torch.save(model.state_dict())``) into the
  ``timm`` backbone of the same name; its classifier into a ``linear`` head, or left out.
* ``torchvision`` — any torchvision classification ``state_dict`` (``resnet50-11ad3fa6.pth``,
  ``convnext_tiny-983f1562.pth`` …) into the ``torchvision`` backbone of the same name; its
  classifier into a ``linear`` head, or left out. (``torchvision_resnet`` stays the format for
  modforge's own ``resnet18``/``resnet34``.)

The ``timm`` and ``torchvision`` formats are named, never guessed (``format: auto`` does not
pick them): the same file — a ResNet's — is a timm one and a torchvision one alike.

The key maps themselves live with their family (:func:`.aasist.official_aasist_state_dict`,
:func:`.rawnet2.reference_state_dict`, :func:`.resnet.torchvision_resnet_state_dict`,
:func:`.timm_models.timm_state_dict`, :func:`.torchvision_models.torchvision_state_dict`); this
file makes them ``model.init`` formats.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional, TypeVar

from ...core.registries import register_checkpoint_format
from ...core.weight_formats import CheckpointFormat, WeightFormatError, tensors_of
from ..weight_files import HUB_WEIGHT_FILES, hub_weights_file
from .aasist import official_aasist_state_dict
from .rawnet2 import reference_state_dict as rawnet2_state_dict
from .resnet import torchvision_resnet_state_dict
from .timm_models import timm_state_dict
from .torchvision_models import torchvision_state_dict

__all__ = ["BaselineRawNet2", "OfficialAASIST", "TimmWeights", "TorchvisionResNet", "TorchvisionWeights"]

log = logging.getLogger("modforge.model")
T = TypeVar("T")


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


def _converted(loaded: Any, path: Path, convert: Callable[[dict[str, Any]], T]) -> T:
    """``convert`` of the file's tensors; its ValueError becomes a WeightFormatError naming the file."""
    state = tensors_of(loaded, what=f"the state dict in {path}")
    try:
        return convert(state)
    except ValueError as exc:
        raise WeightFormatError(f"{path}: {exc}") from None


class _ReferenceWeights(CheckpointFormat, metaclass=abc.ABCMeta):
    """A family's released weights, told by ``required`` keys and renamed by a fixed key map
    (:meth:`reference_state_dict`) into a backbone stage and, unless ``head`` is None, a
    ``linear`` head stage."""

    required: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, backbone: str = "backbone", head: Optional[str] = "head"):
        self.backbone, self.head = backbone, head

    @classmethod
    def recognises(cls, loaded: Any, path: Path) -> bool:
        return isinstance(loaded, dict) and cls.required <= set(loaded)

    @staticmethod
    @abc.abstractmethod
    def reference_state_dict(state: dict[str, Any]) -> dict[str, Any]:
        """The file's tensors named ``parts.backbone.…``/``parts.head.…`` (each family's key map)."""

    def convert(self, loaded: Any, path: Path) -> dict[str, Any]:
        return _restaged(_converted(loaded, path, self.reference_state_dict), self.backbone, self.head)


@register_checkpoint_format("aasist_official")
class OfficialAASIST(_ReferenceWeights):
    """The authors' released AASIST / AASIST-L weights (clovaai/aasist, ``AASIST.pth``).

    Args:
        backbone: the model's stage holding ``aasist``/``aasist_l``.
        head: the model's ``linear`` head stage (the reference's ``out_layer``), or None to
            leave the reference classifier out (e.g. a new head for other classes).
    """

    published = "the authors' AASIST.pth / AASIST-L.pth: https://github.com/clovaai/aasist/tree/main/models/weights"
    required = frozenset({"pos_S", "master1", "master2", "out_layer.weight"})
    reference_state_dict = staticmethod(official_aasist_state_dict)


@register_checkpoint_format("rawnet2_baseline")
class BaselineRawNet2(_ReferenceWeights):
    """The ASVspoof 2021 baseline's released RawNet2 weights (``pre_trained_DF_RawNet2.pth``).

    Args:
        backbone: the model's ``rawnet2`` stage.
        head: the ``linear`` head stage for the reference's ``fc2_gru``, or None to leave it out.
    """

    published = "pre_trained_DF_RawNet2.pth of the ASVspoof 2021 baseline: https://www.asvspoof.org/asvspoof2021/pre_trained_DF_RawNet2.zip"
    required = frozenset({"first_bn.weight", "fc1_gru.weight", "fc2_gru.weight"})
    reference_state_dict = staticmethod(rawnet2_state_dict)


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

    published = "torchvision's resnet18-f37072fd.pth / resnet34-b627a593.pth: https://download.pytorch.org/models/"

    def __init__(self, depth: Optional[Literal[18, 34]] = None, backbone: str = "backbone",
                 head: Optional[str] = "head"):  # fmt: skip
        self.depth, self.backbone, self.head = depth, backbone, head

    @classmethod
    def recognises(cls, loaded: Any, path: Path) -> bool:
        return isinstance(loaded, dict) and {"conv1.weight", "bn1.running_mean", "layer1.0.conv1.weight",
                                             "fc.weight"} <= set(loaded)  # fmt: skip

    def convert(self, loaded: Any, path: Path) -> dict[str, Any]:
        def resnet(state: dict[str, Any]) -> dict[str, Any]:
            return torchvision_resnet_state_dict(state, self.depth or (34 if "layer3.5.conv1.weight" in state else 18))

        return _restaged(_converted(loaded, path, resnet), self.backbone, self.head)


def _library_state(
    loaded: Any, path: Path, key_map: Callable[..., tuple[dict[str, Any], list[str]]], what: str, backbone: str,
    head: Optional[str], classifier: Any,
) -> dict[str, Any]:  # fmt: skip
    """A library model's file (timm's, torchvision's) under ``parts.<backbone>.model.``, its classifier
    under ``parts.<head>.`` or left out with a log line naming it."""
    converted, left = _converted(
        loaded,
        path,
        lambda state: key_map(state, backbone_prefix=f"parts.{backbone}.model.",
                              head_prefix=f"parts.{head}." if head else None, classifier=classifier),  # fmt: skip
    )
    if left:
        log.info("%s: left out the %d tensors of %s's classifier (%s); head: <stage> loads it into a linear head",
                 path, len(left), what, ", ".join(sorted({k.rpartition(".")[0] for k in left})))  # fmt: skip
    return converted


@register_checkpoint_format("timm")
class TimmWeights(CheckpointFormat):
    """A timm model's own ``state_dict`` into the ``timm`` backbone built with the same ``name``:
    a ``.safetensors`` file, a ``.pth``/``.bin`` read with ``torch.load(weights_only=True)``, or a
    folder downloaded from the hub's ``timm/<model>`` repository (its ``model.safetensors``, else
    ``pytorch_model.bin``).

    Each tensor goes to ``parts.<backbone>.model.<timm key>``; the classifier's go to a
    ``linear`` head (``head``) or are left out with a log line (the default: a new head for
    other classes). A ``features_only`` backbone keeps only the layers its maps need, so the
    file's later ones (a final norm, a conv head, unused stages) are reported by ``model.init``
    as keys the model does not have; leave them out with ``exclude`` (e.g.
    ``exclude: ["parts.backbone.model.head.*"]`` for a ConvNeXt — the message lists them).
    Named only: ``format: auto`` never picks it.

    Args:
        backbone: the model's timm stage.
        head: the linear head stage for the file's classifier, or None to leave it out.
        classifier: the file's classifier modules (timm's pretrained_cfg['classifier'], e.g.
            [head.fc]); None: the modules of the file named as timm names classifiers (fc,
            head, head.fc, classifier, head_dist …).
    """

    published = "a timm model's model.safetensors: https://huggingface.co/timm/<model name>"

    def __init__(self, backbone: str = "backbone", head: Optional[str] = None,
                 classifier: Optional[list[str]] = None):  # fmt: skip
        self.backbone, self.head = backbone, head
        self.classifier = tuple(classifier) if classifier is not None else None

    def locate(self, path: Path) -> Path:
        return hub_weights_file(path, f"is a folder without {' or '.join(HUB_WEIGHT_FILES)}")

    def convert(self, loaded: Any, path: Path) -> dict[str, Any]:
        return _library_state(loaded, path, timm_state_dict, "timm", self.backbone, self.head, self.classifier)


@register_checkpoint_format("torchvision")
class TorchvisionWeights(CheckpointFormat):
    """A torchvision classification model's ``state_dict`` (``resnet50-11ad3fa6.pth``,
    ``efficientnet_b0_rwightman-7f5810bc.pth`` …, read with ``torch.load(weights_only=True)``;
    or a ``.safetensors`` file) into the ``torchvision`` backbone built with the same ``name``.

    Each tensor goes to ``parts.<backbone>.model.<torchvision key>``; the classifier's (the last
    linear layer: ``fc``, ``classifier.N``, ``head``, ``heads.head``) go to a ``linear`` head
    (``head``) or are left out with a log line (the default). A ``features_only`` backbone keeps
    only the layers its maps need: the file's later ones are reported by ``model.init`` as keys
    the model does not have (leave them out with ``exclude``). Generalises ``torchvision_resnet``,
    which stays the format for modforge's own ``resnet18``/``resnet34``. Named only: ``format:
    auto`` never picks it.

    Args:
        backbone: the model's torchvision stage.
        head: the linear head stage for the file's classifier, or None to leave it out.
        classifier: the file's classifier module (e.g. classifier.3); None: told from the file.
    """

    published = "a torchvision weights file (torchvision.models.get_weight('<NAME>_Weights.DEFAULT').url): https://download.pytorch.org/models/"

    def __init__(self, backbone: str = "backbone", head: Optional[str] = None, classifier: Optional[str] = None):
        self.backbone, self.head, self.classifier = backbone, head, classifier

    def convert(self, loaded: Any, path: Path) -> dict[str, Any]:
        return _library_state(loaded, path, torchvision_state_dict, "torchvision", self.backbone, self.head,
                              self.classifier)  # fmt: skip
