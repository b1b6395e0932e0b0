"""``timm`` — any model of the timm library (pytorch-image-models) as a backbone, chosen by name.

``--backbone timm --name convnext_tiny`` builds ``timm.create_model("convnext_tiny",
num_classes=0, in_chans=in_dim)``: timm's own network with its classifier removed, so the
output is timm's pooled pre-logits features (``forward_head(forward_features(x),
pre_logits=True)``, the input of timm's classifier) — ``out_dim`` is timm's
``head_hidden_size`` (``num_features`` where a model has no hidden head layer). With
``features_only: true`` the output is a feature pyramid instead, as timm's own
``features_only`` gives it: the maps at ``out_indices`` of timm's ``feature_info`` (a list
of ``[B, C, H, W]``; ``out_dim`` is the list of their channel counts), which the ``fpn``
neck and the ``fcos`` head take unchanged. The network is timm's, not a copy: a timm state
dict loads into it under the same names (``model.<timm key>``), and it computes what timm's
model computes.

Weights. Building never downloads anything: the network starts from timm's random
initialisation, and published weights come from a local file through ``model.init`` with
``format: timm`` (a ``.safetensors`` file, or a ``.pth``/``.bin`` read with
``torch.load(weights_only=True)``; see :class:`~.published_weights.TimmWeights`). ``hub:
true`` lets timm download the weights of ``name`` (a tag such as ``convnext_tiny.fb_in22k``
chooses which) from the Hugging Face hub when the part is built — the network is reached
only then, only because the config or command line says so, and not at all when
huggingface_hub's cache already holds the file (it is then read as a local file: safetensors,
or ``torch.load(weights_only=True)``). A run trained with ``hub: true`` keeps it in its stored
config, but rebuilding that run (``modforge test``, resume, export) fetches nothing: its weights
come from the checkpoint, and the model builder turns downloads off while it builds
(:func:`modforge.core.downloads.no_downloads`) — a stored config never chooses what is
connected to.

Only a typed, safe set of timm's model arguments is exposed (``drop_rate``,
``drop_path_rate``, ``drop_block_rate``, ``global_pool``, ``img_size``); arguments that
would make timm read files or URLs (``pretrained_cfg_overlay``, ``checkpoint_path``,
``cache_dir``) are not, so a config — data — cannot make timm read anything.

``timm`` is an optional dependency (``pip install modforge[vision]``), imported only when
this part is built: ``modforge list`` does not import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Optional

import torch
import torch.nn as nn

from ...core.constraints import PositiveInt, Probability
from ...core.downloads import downloads_allowed
from ...core.registries import register_backbone
from ..base import Backbone
from ..layouts import Layout
from .library_models import first_line, import_library, modules_of, split_classifier, unknown_name

__all__ = ["TimmBackbone", "classifier_names", "import_timm", "timm_state_dict"]

GlobalPool = Literal["avg", "max", "avgmax", "catavgmax", "token", "map"]


def import_timm() -> Any:
    """The ``timm`` module, or an ImportError saying how to install it."""
    return import_library("timm", "timm")


def check_model_name(timm: Any, name: str) -> None:
    """Refuse a name timm does not know, with the closest names timm has."""
    if not timm.is_model(name):
        raise unknown_name("timm", name.split(".", 1)[0], timm.list_models(),
                           "python -c \"import timm; print(timm.list_models('conv*'))\"")  # fmt: skip


@register_backbone("timm")
class TimmBackbone(Backbone):
    """Any timm model by name, its classifier removed: pooled features, or a feature pyramid.

    ``out`` is timm's pooled pre-logits vector ``[B, head_hidden_size]``; with ``features_only``
    a list of maps ``[B, C_i, H_i, W_i]`` (multiscale, for ``fpn``). Input ``[B, in_dim, H, W]``
    (timm's ``in_chans``). Weights come from a local file through ``model.init`` with
    ``format: timm``; nothing is downloaded unless ``hub`` is true.

    Not scriptable by ``torch.jit.script``: its forward returns a vector or a list of maps, one
    type per build, and timm's ``forward_intermediates`` is not written for TorchScript. The
    ``torchscript`` engine traces it instead.

    Args:
        in_dim: input channels (wired by the builder; timm's in_chans).
        name: the timm model, e.g. resnet50, convnext_tiny, efficientnet_b0,
            vit_small_patch16_224 (timm.list_models() lists them; a pretrained tag such as
            convnext_tiny.fb_in22k picks the weights hub downloads).
        features_only: output the feature maps at out_indices (a multiscale list for fpn)
            instead of the pooled vector.
        out_indices: which levels of timm's feature_info to output with features_only (negative
            counts from the end; default: every level — timm's own default for CNNs; a ViT's
            levels are its blocks, so choose some there).
        hub: let timm download the pretrained weights of name from the Hugging Face hub when the
            part is built (network access unless huggingface_hub's cache holds them). Off: nothing
            is downloaded and the weights are timm's random initialisation until model.init loads
            a local file.
        drop_rate: dropout on the pooled features (timm's drop_rate; the model's default when unset).
        drop_path_rate: stochastic depth rate (the model's default when unset).
        drop_block_rate: DropBlock rate, for the models that have it (ResNets).
        global_pool: timm's pooling of the last map: 'avg', 'max', 'avgmax', 'catavgmax' (twice
            the channels), 'token' or 'map' for transformers (the model's default when unset).
        img_size: the input size a model with fixed position embeddings is built for (ViT-style
            models; the model's default when unset).
    """

    accepts = (Layout.IMAGE,)
    produces = Layout.VECTOR
    out_dim_rule = ("timm's head_hidden_size (num_features) of the model; with features_only, the channels of "
                    "each out_indices level of its feature_info")  # fmt: skip

    def __init__(
        self,
        in_dim: int = 3,
        name: str = "resnet18",
        features_only: bool = False,
        out_indices: Optional[tuple[int, ...]] = None,
        hub: bool = False,
        drop_rate: Optional[Probability] = None,
        drop_path_rate: Optional[Probability] = None,
        drop_block_rate: Optional[Probability] = None,
        global_pool: Optional[GlobalPool] = None,
        img_size: Optional[PositiveInt] = None,
    ):
        super().__init__()
        timm = import_timm()
        check_model_name(timm, name)
        if out_indices is not None and not features_only:
            raise ValueError("out_indices chooses the feature maps of features_only: true; set features_only too")
        if out_indices is not None and not out_indices:
            raise ValueError("out_indices must name at least one level (leave it unset for all of them)")
        options = {"drop_rate": drop_rate, "drop_path_rate": drop_path_rate, "drop_block_rate": drop_block_rate,
                   "global_pool": global_pool, "img_size": img_size}  # fmt: skip
        kwargs = {k: v for k, v in options.items() if v is not None}
        self.name, self.features_only, self.getter = name, features_only, False
        model = _create(timm, name, hub=hub, in_chans=in_dim, num_classes=0, **kwargs)
        if features_only:
            self._to_features(timm, model, name, hub, in_dim, kwargs, out_indices)
        else:
            self.model = model
            self.out_dim = int(getattr(model, "head_hidden_size", None) or model.num_features)
            self.feature_modules = [str(f["module"]) for f in getattr(model, "feature_info", [])]

    def _to_features(self, timm: Any, model: nn.Module, name: str, hub: bool, in_dim: int, kwargs: dict,
                     out_indices: Optional[tuple[int, ...]]) -> None:  # fmt: skip
        """Prune ``model`` to the levels it must output (timm's ``FeatureGetterNet`` without its
        wrapper, so the state dict keeps timm's own key names); models without
        ``forward_intermediates`` use timm's ``features_only`` network (its key names)."""
        self.produces = Layout.MULTISCALE
        indices = list(out_indices) if out_indices is not None else None
        info = getattr(model, "feature_info", None)
        if hasattr(model, "forward_intermediates") and hasattr(model, "prune_intermediate_layers") and info:
            count = len(info)
            if indices is not None and any(not -count <= i < count for i in indices):
                raise ValueError(f"out_indices {tuple(indices)} out of range: timm's {name} has {count} feature "
                                 f"levels (0–{count - 1}; channels {[f['num_chs'] for f in info]})")  # fmt: skip
            taken = model.prune_intermediate_layers(indices if indices is not None else count, prune_norm=True,
                                                    prune_head=True)  # fmt: skip
            self.model, self.getter = model, True
            self.out_indices = [int(i) for i in taken]
            chosen = [info[i] for i in self.out_indices]
            self.out_dim = [int(f["num_chs"]) for f in chosen]
            self.out_strides = [int(f["reduction"]) for f in chosen]
            self.feature_modules = [str(f["module"]) for f in chosen]
            return
        extra = {"out_indices": tuple(indices)} if indices is not None else {}
        net = _create(timm, name, hub=hub, in_chans=in_dim, features_only=True, **extra, **kwargs)
        self.model, self.getter = net, False
        self.out_indices = list(net.feature_info.out_indices)
        self.out_dim = [int(c) for c in net.feature_info.channels()]
        self.out_strides = [int(r) for r in net.feature_info.reduction()]
        self.feature_modules = []

    def forward(self, x: torch.Tensor):
        if not self.features_only:
            return self.model(x)
        if self.getter:
            return self.model.forward_intermediates(x, indices=self.out_indices, intermediates_only=True)
        return self.model(x)

    def intermediate_modules(self) -> list[nn.Module]:
        """timm's ``feature_info`` modules (the stages), for ``forward_intermediates``/``returnt="full"``."""
        found = []
        for path in self.feature_modules:
            try:
                found.append(self.model.get_submodule(path))
            except AttributeError:
                continue
        return found or [self.model]

    def forward_intermediates(self, x: torch.Tensor) -> tuple[Any, list[torch.Tensor]]:
        """``(output, stage outputs)``; with ``features_only`` the stages are the output's maps."""
        if self.features_only:
            maps = self(x)
            return maps, list(maps)
        return super().forward_intermediates(x)


def _create(timm: Any, name: str, *, hub: bool, **kwargs: Any) -> nn.Module:
    """``timm.create_model`` with modforge's rules: no download unless ``hub`` (and then none when
    huggingface_hub's cache already holds the file); one clear error for an argument the model
    does not take and for a download that fails."""
    if hub and not downloads_allowed():  # the weights come from a checkpoint: fetch nothing (core/downloads.py)
        hub = False
    source, cached = _hub_weights(timm, name) if hub else ("", None)
    if cached is not None:  # read from the cache as a local file: no request at all
        kwargs["pretrained_cfg_overlay"] = {"file": cached}
    try:
        return timm.create_model(name, pretrained=hub, **kwargs)
    except TypeError as exc:
        taken = [k for k in ("drop_rate", "drop_path_rate", "drop_block_rate", "global_pool", "img_size")
                 if k in kwargs and k in str(exc)]  # fmt: skip
        what = f" does not take {', '.join(taken)}" if taken else f" cannot be built with {sorted(kwargs)}"
        raise ValueError(f"timm's {name}{what} ({first_line(exc)})") from None
    except Exception as exc:
        if not hub:
            raise
        raise ValueError(
            f"hub: true could not fetch the pretrained weights of timm's {name} ({source}): "
            f"{type(exc).__name__}: {first_line(exc)}. Without a network, download the file where there is one "
            f"(e.g. model.safetensors of {source}), then load it with model.init: "
            "{path: model.safetensors, format: timm} and hub: false"
        ) from None


def _hub_weights(timm: Any, name: str) -> tuple[str, Optional[str]]:
    """``(where timm would download name's weights from, the file in huggingface_hub's cache or
    None)``; an error when timm has no weights for ``name``."""
    from timm.models import get_pretrained_cfg

    try:
        cfg = get_pretrained_cfg(name)
    except RuntimeError as exc:  # a tag timm does not have for this model
        raise ValueError(f"hub: true, but {first_line(exc)}") from None
    hub_id = getattr(cfg, "hf_hub_id", None) if cfg is not None else None
    url = getattr(cfg, "url", None) if cfg is not None else None
    if not (hub_id or url):
        tags = timm.list_pretrained(f"{name.split('.', 1)[0]}.*")
        also = f" (weights exist for: {', '.join(tags[:6])})" if tags else ""
        raise ValueError(f"hub: true, but timm has no pretrained weights for '{name}'{also}")
    if not hub_id:
        return str(url), None
    return f"hf.co/{hub_id}", _cached(hub_id, getattr(cfg, "hf_hub_filename", None) or "pytorch_model.bin")


def _cached(hub_id: str, filename: str) -> Optional[str]:
    """The weights file of ``hub_id`` in huggingface_hub's cache (safetensors first, as timm), or None."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    repo, _, revision = hub_id.partition("@")
    names = [filename]
    if filename.endswith(".bin"):
        safe = "model.safetensors" if filename == "pytorch_model.bin" else filename[: -len(".bin")] + ".safetensors"
        names.insert(0, safe)
    for candidate in names:
        found = try_to_load_from_cache(repo, candidate, revision=revision or None)
        if isinstance(found, str):
            return found
    return None


# ------------------------------------------------------------------ weights
def classifier_names() -> set[str]:
    """Every module name timm's pretrained configs give as a model's classifier (``fc``,
    ``head.fc``, ``head``, ``classifier``, ``head_dist`` …)."""
    timm = import_timm()
    from timm.models import get_pretrained_cfg

    names: set[str] = set()
    for arch in timm.list_models():
        cfg = get_pretrained_cfg(arch)
        found = getattr(cfg, "classifier", None) if cfg is not None else None
        if isinstance(found, str):
            names.add(found)
        elif isinstance(found, (list, tuple)):
            names.update(str(c) for c in found)
    return names


def timm_state_dict(
    state: Mapping[str, torch.Tensor],
    *,
    backbone_prefix: str = "parts.backbone.model.",
    head_prefix: Optional[str] = None,
    classifier: Optional[tuple[str, ...]] = None,
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """A timm model's ``state_dict`` under modforge's keys: ``(converted, classifier keys left out)``.

    Every tensor goes to ``backbone_prefix + key`` (the ``timm`` part holds timm's network as
    ``model``) except the classifier's — the modules named by ``classifier``, else those of
    timm's classifier names (:func:`classifier_names`) the file has: to ``head_prefix +
    "fc.weight"/"fc.bias"`` (a ``linear`` head) when ``head_prefix`` is given, else left out.

    Raises:
        ValueError: a named classifier is not in the file, or a head was asked for and the
            classifier is not one linear layer.
    """
    modules = modules_of(state)
    if classifier is not None:
        absent = [c for c in classifier if c not in modules]
        if absent:
            raise ValueError(f"classifier {', '.join(absent)} is not in the file")
        chosen = list(classifier)
    else:
        chosen = sorted(c for c in classifier_names() if c in modules)
    return split_classifier(state, chosen, backbone_prefix=backbone_prefix, head_prefix=head_prefix)
