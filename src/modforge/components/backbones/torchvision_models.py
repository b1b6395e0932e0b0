"""``torchvision`` — torchvision's classification models as a backbone, chosen by name.

``--backbone torchvision --name resnet50`` builds ``torchvision.models.get_model("resnet50",
weights=None)`` — torchvision's own network, not a copy — and replaces its classifier (the
last linear layer: ``fc``, ``classifier.1``, ``classifier.3``, ``head``, ``heads.head`` …) by
the identity, so the output is the vector torchvision's classifier reads (``out_dim`` is that
layer's ``in_features``: 2048 for resnet50, 1024 for mobilenet_v3_large, 768 for
convnext_tiny and swin_t). Every classification model of ``torchvision.models`` is
available except SqueezeNet (its classifier is a convolution); a torchvision state dict loads
into it under the same names (``model.<torchvision key>``) and it computes what torchvision's
model computes.

``features_only: true`` gives a feature pyramid instead, for necks such as ``fpn``: a
``torchvision.models.feature_extraction`` graph of the network up to the maps it returns
(a list of ``[B, C, H, W]``; ``out_dim`` is their channel counts). By default those are the
last block at each stride 4, 8, 16 and 32 (ResNets' ``layer1``–``layer4``, RegNets'
``trunk_output.block1``–``block4``, the stage ends of the ``features`` of MobileNets,
EfficientNets, ConvNeXts, DenseNets and VGGs); ``out_indices`` picks among them and
``return_layers`` names any graph nodes instead
(``torchvision.models.feature_extraction.get_graph_node_names``). Vision and Swin
transformers and MaxViT have no such maps and are refused in this mode.

Weights. Building never downloads anything (``weights=None``): published weights come from
a local file (``resnet50-11ad3fa6.pth`` …) through ``model.init`` with ``format:
torchvision`` (:class:`~.published_weights.TorchvisionWeights`), read with
``torch.load(weights_only=True)``.

``torchvision`` is an optional dependency (``pip install modforge[vision]``), imported only
when this part is built: ``modforge list`` does not import it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Optional

import torch
import torch.nn as nn

from ...core.constraints import PositiveInt, Probability
from ...core.registries import register_backbone
from ..base import Backbone
from ..layouts import Layout
from .library_models import first_line, import_library, modules_of, split_classifier, unknown_name

__all__ = ["TorchvisionBackbone", "default_levels", "torchvision_classifier", "torchvision_state_dict"]

PROBE_SIZE = 224  # side of the dry-run input that finds the stage ends (ImageNet's; stride 32 → 7×7)
LEVEL_STRIDES = (4, 8, 16, 32)
NO_FEATURE_MAPS = ("VisionTransformer", "SwinTransformer", "MaxVit")  # tokens or [B, H, W, C] stages
_OPTIONS = ("dropout", "stochastic_depth_prob", "image_size")


def classification_models() -> list[str]:
    """The names of torchvision's classification models (``torchvision.models.list_models``)."""
    import_library("torchvision", "torchvision")
    import torchvision.models as models

    return list(models.list_models(module=models))


@register_backbone("torchvision")
class TorchvisionBackbone(Backbone):
    """A torchvision classification model by name, its classifier removed: pooled features or a feature pyramid.

    ``out`` is the vector torchvision's last linear layer reads ``[B, in_features]``; with
    ``features_only`` a list of maps ``[B, C_i, H_i, W_i]`` (multiscale, for ``fpn``). Input
    ``[B, in_dim, H, W]``. Weights come from a local file through ``model.init`` with ``format:
    torchvision``; nothing is downloaded.

    Not scriptable by ``torch.jit.script``: its forward returns a vector or a list of maps, one
    type per build, and the feature-extraction graph is not written for TorchScript. The
    ``torchscript`` engine traces it instead.

    Args:
        in_dim: input channels (wired by the builder). Other than 3, the first convolution is
            replaced by one taking in_dim channels (PyTorch's default initialisation; a
            3-channel file's weights no longer fit it).
        name: the torchvision classification model, e.g. resnet50, mobilenet_v3_large,
            regnet_y_400mf, efficientnet_b0, convnext_tiny, swin_t, vit_b_16
            (torchvision.models.list_models() lists them).
        features_only: output feature maps (a multiscale list for fpn) instead of the pooled vector.
        out_indices: with features_only, which of the default levels (strides 4, 8, 16, 32 →
            0-3; negative counts from the end) to output.
        return_layers: with features_only, the graph nodes whose outputs to return instead
            (e.g. [layer2, layer3, layer4]; see torchvision.models.feature_extraction.get_graph_node_names).
        dropout: the model's dropout rate (models that take one: MobileNets, EfficientNets,
            VGG, ViT …; the model's default when unset).
        stochastic_depth_prob: stochastic depth rate (EfficientNets, ConvNeXts, Swin, MaxViT;
            the model's default when unset).
        image_size: the input size a Vision Transformer is built for (default 224).
    """

    accepts = (Layout.IMAGE,)
    produces = Layout.VECTOR
    out_dim_rule = ("in_features of the model's last linear layer; with features_only, the channels of each "
                    "returned map")  # fmt: skip

    def __init__(
        self,
        in_dim: int = 3,
        name: str = "resnet18",
        features_only: bool = False,
        out_indices: Optional[tuple[int, ...]] = None,
        return_layers: Optional[tuple[str, ...]] = None,
        dropout: Optional[Probability] = None,
        stochastic_depth_prob: Optional[Probability] = None,
        image_size: Optional[PositiveInt] = None,
    ):
        super().__init__()
        if (out_indices is not None or return_layers is not None) and not features_only:
            raise ValueError("out_indices and return_layers choose the maps of features_only: true; set features_only")
        if out_indices is not None and return_layers is not None:
            raise ValueError("give out_indices (among the default levels) or return_layers (graph nodes), not both")
        if (out_indices is not None and not out_indices) or (return_layers is not None and not return_layers):
            raise ValueError("out_indices / return_layers must name at least one level")
        options = {"dropout": dropout, "stochastic_depth_prob": stochastic_depth_prob, "image_size": image_size}
        model = build_torchvision(name, {k: v for k, v in options.items() if v is not None})
        self.name, self.features_only = name, features_only
        classifier = _last_linear(model, name)
        if in_dim != 3:
            _replace_first_conv(model, in_dim, name)
        if features_only:
            self._to_features(model, name, in_dim, out_indices, return_layers)
            return
        width = model.get_submodule(classifier).in_features
        _set(model, classifier, nn.Identity())
        self.model, self.classifier = model, classifier
        self.out_dim = int(width)
        self.block_names = [n for n, _ in _spine(model) if n != classifier]

    def _to_features(self, model: nn.Module, name: str, in_dim: int, out_indices: Optional[tuple[int, ...]],
                     return_layers: Optional[tuple[str, ...]]) -> None:  # fmt: skip
        from torchvision.models.feature_extraction import create_feature_extractor

        if type(model).__name__ in NO_FEATURE_MAPS:
            raise ValueError(f"features_only needs a convolutional network: torchvision's {name} "
                             f"({type(model).__name__}) has no [B, C, H, W] stage maps; use it pooled")  # fmt: skip
        self.produces = Layout.MULTISCALE
        if return_layers is None:
            levels = default_levels(model, in_dim)
            if out_indices is not None:
                count = len(levels)
                if any(not -count <= i < count for i in out_indices):
                    raise ValueError(f"out_indices {tuple(out_indices)} out of range: torchvision's {name} has "
                                     f"{count} levels ({', '.join(n for n, _ in levels)})")  # fmt: skip
                levels = [levels[i] for i in out_indices]
            nodes = [n for n, _ in levels]
        else:
            nodes = list(return_layers)
        try:
            self.model = create_feature_extractor(model, return_nodes={node: str(i) for i, node in enumerate(nodes)})
        except ValueError as exc:
            raise ValueError(f"return_layers of torchvision's {name}: {first_line(exc)} (the node names are "
                             "torchvision.models.feature_extraction.get_graph_node_names(model))") from None  # fmt: skip
        self.return_layers = nodes
        maps = _probe(self.model, in_dim, lambda m, x: list(m(x).values()))
        bad = [n for n, t in zip(nodes, maps, strict=True) if t.dim() != 4]
        if bad:
            raise ValueError(f"return_layers {', '.join(bad)} of torchvision's {name} are not [B, C, H, W] maps")
        self.out_dim = [int(t.shape[1]) for t in maps]
        self.out_strides = [_stride(t) for t in maps]
        self.block_names = []

    def forward(self, x: torch.Tensor):
        if self.features_only:
            return list(self.model(x).values())
        return self.model(x)

    def intermediate_modules(self) -> list[nn.Module]:
        """The blocks of the network's trunk (``layer1``… or the ``features`` stages), in order."""
        return [self.model.get_submodule(n) for n in self.block_names] or [self.model]

    def forward_intermediates(self, x: torch.Tensor) -> tuple[Any, list[torch.Tensor]]:
        """``(output, block outputs)``; with ``features_only`` the blocks are the output's maps."""
        if self.features_only:
            maps = self(x)
            return maps, list(maps)
        return super().forward_intermediates(x)


def build_torchvision(name: str, options: dict[str, Any]) -> nn.Module:
    """``torchvision.models.get_model(name, weights=None, **options)``, with one clear error for
    an unknown name or an option the model does not take (nothing is downloaded)."""
    import_library("torchvision", "torchvision")
    from torchvision.models import get_model

    known = classification_models()
    if name not in known:
        raise unknown_name("torchvision classification", name, known,
                           "python -c \"import torchvision.models as m; print(m.list_models(module=m))\"")  # fmt: skip
    if name in ("googlenet", "inception_v3"):  # no auxiliary classifiers; torchvision's own init without its warning
        options = {"aux_logits": False, "init_weights": True, **options}
    try:
        return get_model(name, weights=None, **options)
    except TypeError as exc:
        taken = [k for k in _OPTIONS if k in options and k in str(exc)]
        what = f" does not take {', '.join(taken)}" if taken else f" cannot be built with {sorted(options)}"
        raise ValueError(f"torchvision's {name}{what} ({first_line(exc)})") from None


def _last_linear(model: nn.Module, name: str) -> str:
    linears = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not linears:
        raise ValueError(f"torchvision's {name} has no linear classifier to remove (its classifier is a "
                         "convolution); it cannot give pooled features")  # fmt: skip
    return linears[-1]


def _replace_first_conv(model: nn.Module, in_dim: int, name: str) -> None:
    path, conv = next(((n, m) for n, m in model.named_modules() if isinstance(m, nn.Conv2d) and m.in_channels == 3),
                      (None, None))  # fmt: skip
    if conv is None:
        raise ValueError(f"torchvision's {name}: no 3-channel first convolution to give {in_dim} input channels")
    _set(model, path, nn.Conv2d(in_dim, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                                conv.dilation, conv.groups, conv.bias is not None, conv.padding_mode))  # fmt: skip


def _set(model: nn.Module, path: str, module: nn.Module) -> None:
    """Replace the submodule at dotted ``path`` (``Module.set_submodule`` is newer than torch 2.2)."""
    parent, _, leaf = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, module)


def _spine(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The trunk's blocks in order: the children of ``features`` / ``trunk_output`` / ``layers``
    (MobileNets, EfficientNets, ConvNeXts, DenseNets, VGGs; RegNets; MNASNets), else the
    model's own children (ResNets, ShuffleNets, GoogLeNet, Inception)."""
    for attr in ("features", "trunk_output", "layers"):
        sub = getattr(model, attr, None)
        if isinstance(sub, nn.Sequential):
            return [(f"{attr}.{n}", m) for n, m in sub.named_children()]
    return list(model.named_children())


def _probe(model: nn.Module, in_dim: int, run: Any) -> Any:
    """``run(model, x)`` on a zero image in eval mode, without gradients; the mode is restored."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return run(model, torch.zeros(1, in_dim, PROBE_SIZE, PROBE_SIZE))
    finally:
        model.train(was_training)


def _stride(t: torch.Tensor) -> int:
    return 2 ** round(math.log2(PROBE_SIZE / max(1, int(t.shape[-1]))))


def default_levels(model: nn.Module, in_dim: int = 3) -> list[tuple[str, int]]:
    """``[(block name, stride)]``: the last block of the trunk at each stride 4, 8, 16 and 32
    (found with one dry run; ``layer1``–``layer4`` for a ResNet)."""
    seen: dict[str, torch.Tensor] = {}
    handles = [m.register_forward_hook(lambda _m, _i, out, n=n: seen.__setitem__(n, out)) for n, m in _spine(model)]
    try:
        _probe(model, in_dim, lambda m, x: m(x))
    finally:
        for handle in handles:
            handle.remove()
    last: dict[int, str] = {}
    for name, _ in _spine(model):
        out = seen.get(name)
        if isinstance(out, torch.Tensor) and out.dim() == 4 and _stride(out) in LEVEL_STRIDES:
            last[_stride(out)] = name
    return [(last[s], s) for s in LEVEL_STRIDES if s in last]


# ------------------------------------------------------------------ weights
def torchvision_classifier(state: Mapping[str, Any]) -> Optional[str]:
    """The classifier module of a torchvision classification ``state_dict``: ``fc``, ``head``,
    ``heads.head``, ``classifier``, or the highest-numbered ``classifier.N`` holding a 2-D weight
    (MobileNets, EfficientNets, ConvNeXts, VGG, MaxViT); None when there is none."""
    modules = modules_of(state)
    for name in ("fc", "head", "heads.head", "classifier"):
        if name in modules and getattr(state.get(f"{name}.weight"), "ndim", 0) == 2:
            return name
    numbered = [int(m.split(".")[1]) for m in modules if m.count(".") == 1 and m.startswith("classifier.")
                and m.split(".")[1].isdigit() and getattr(state.get(f"{m}.weight"), "ndim", 0) == 2]  # fmt: skip
    return f"classifier.{max(numbered)}" if numbered else None


def torchvision_state_dict(
    state: Mapping[str, torch.Tensor],
    *,
    backbone_prefix: str = "parts.backbone.model.",
    head_prefix: Optional[str] = None,
    classifier: Optional[str] = None,
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """A torchvision classification model's ``state_dict`` under modforge's keys:
    ``(converted, classifier keys left out)``.

    Every tensor goes to ``backbone_prefix + key`` (the ``torchvision`` part holds the network
    as ``model``) except the classifier's (``classifier``, else :func:`torchvision_classifier`):
    to ``head_prefix + "fc.weight"/"fc.bias"`` (a ``linear`` head) when ``head_prefix`` is
    given, else left out.

    Raises:
        ValueError: a named classifier is not in the file, or a head was asked for and the file
            has no linear classifier.
    """
    if classifier is not None and classifier not in modules_of(state):
        raise ValueError(f"classifier {classifier} is not in the file")
    chosen = classifier or torchvision_classifier(state)
    return split_classifier(state, [chosen] if chosen else [], backbone_prefix=backbone_prefix,
                            head_prefix=head_prefix)  # fmt: skip
