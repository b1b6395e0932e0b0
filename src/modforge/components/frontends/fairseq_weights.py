"""``fairseq_wav2vec2`` — a fairseq wav2vec 2.0 / XLS-R checkpoint (``xlsr2_300m.pt`` …) into an ``ssl`` frontend.

fairseq (Baevski et al., wav2vec 2.0; Babu et al., XLS-R 2021) releases its models as
``torch.save``'d dicts: ``"model"`` (the state dict, fairseq's names), ``"cfg"`` (an omegaconf
tree, or a plain dict of it) or, from older fairseq, ``"args"`` (an ``argparse.Namespace``).
The file is read by :func:`~modforge.core.restricted_pickle.read_with_configs` — ``weights_only``
with argparse/omegaconf admitted as inert stand-ins; anything else in the pickle is refused and
nothing runs. fairseq itself is never needed.

The keys are mapped onto the Hugging Face ``Wav2Vec2Model`` inside the ``ssl`` frontend as
transformers' own conversion script maps them (``convert_wav2vec2_original_pytorch_checkpoint_
to_pytorch.py``); the pre-training heads (quantizer, ``project_q``, ``final_proj``) have no
place in a frontend and are left out with a log line. A fine-tuned (CTC) checkpoint's encoder
(``w2v_encoder.w2v_model.*``) is taken the same way, its CTC projection left out.

The frontend must be built with the file's architecture: :func:`ssl_frontend_args` gives the
``ssl`` arguments for a file's configuration, and the format logs them. Widths, depths, kernels
and the feature-encoder norm show in the tensors (``model.init`` reports any misfit); strides,
attention heads, ``layer_norm_first`` and the activation do not, so the format compares them with
the built frontend's configuration before loading and names each that differs
(:meth:`FairseqWav2Vec2.check_model`) — a model that would compute something else is refused.
"""

from __future__ import annotations

import ast
import logging
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Optional

import torch

from ...core.registries import register_checkpoint_format
from ...core.restricted_pickle import read_with_configs
from ...core.text_safety import quoted
from ...core.weight_formats import CheckpointFormat, WeightFormatError, tensors_of

__all__ = ["FairseqWav2Vec2", "fairseq_model_config", "fairseq_to_hf_key", "ssl_frontend_args"]

log = logging.getLogger("modforge.model")

# fairseq's Wav2Vec2Config defaults (fairseq/models/wav2vec/wav2vec2.py): what an older file may leave out
_DEFAULTS: dict[str, Any] = {
    "extractor_mode": "default", "encoder_layers": 12, "encoder_embed_dim": 768, "encoder_ffn_embed_dim": 3072,
    "encoder_attention_heads": 12, "activation_fn": "gelu", "layer_norm_first": False, "conv_bias": False,
    "conv_feature_layers": "[(512, 10, 5)] + [(512, 3, 2)] * 4 + [(512,2,2)] + [(512,2,2)]",
    "conv_pos": 128, "conv_pos_groups": 16, "pos_conv_depth": 1, "layer_type": "transformer",
    "quantize_input": False,
}  # fmt: skip
_PRETRAINING_HEADS = ("quantizer.", "project_q.", "final_proj.", "target_glu.")
_FINE_TUNED = "w2v_encoder.w2v_model."
# per-layer names: fairseq → transformers (encoder.layers.N.<this>)
_LAYER = {
    "self_attn.q_proj": "attention.q_proj", "self_attn.k_proj": "attention.k_proj",
    "self_attn.v_proj": "attention.v_proj", "self_attn.out_proj": "attention.out_proj",
    "self_attn_layer_norm": "layer_norm", "fc1": "feed_forward.intermediate_dense",
    "fc2": "feed_forward.output_dense", "final_layer_norm": "final_layer_norm",
}  # fmt: skip
_TOP = {
    "layer_norm": "feature_projection.layer_norm", "post_extract_proj": "feature_projection.projection",
    "encoder.layer_norm": "encoder.layer_norm",
}  # fmt: skip
_POS_CONV = {
    "encoder.pos_conv.0.weight_g": "encoder.pos_conv_embed.conv.parametrizations.weight.original0",
    "encoder.pos_conv.0.weight_v": "encoder.pos_conv_embed.conv.parametrizations.weight.original1",
    "encoder.pos_conv.0.bias": "encoder.pos_conv_embed.conv.bias",
}


def fairseq_to_hf_key(key: str) -> Optional[str]:
    """The transformers ``Wav2Vec2Model`` name of fairseq key ``key``; None for a key of a
    pre-training head; ``ValueError`` for a key wav2vec 2.0 does not have."""
    if key.startswith(_PRETRAINING_HEADS):
        return None
    if key == "mask_emb":
        return "masked_spec_embed"
    if key in _POS_CONV:
        return _POS_CONV[key]
    conv = re.fullmatch(r"feature_extractor\.conv_layers\.(\d+)\.(0|2|2\.1)\.(weight|bias)", key)
    if conv:  # 0: the conv; 2: layer 0's group norm ('default'); 2.1: each layer's layer norm ('layer_norm')
        layer, part, tensor = conv.groups()
        return f"feature_extractor.conv_layers.{layer}.{'conv' if part == '0' else 'layer_norm'}.{tensor}"
    block = re.fullmatch(r"encoder\.layers\.(\d+)\.(.+)\.(weight|bias)", key)
    if block and block.group(2) in _LAYER:
        return f"encoder.layers.{block.group(1)}.{_LAYER[block.group(2)]}.{block.group(3)}"
    module, _, tensor = key.rpartition(".")
    if module in _TOP and tensor in ("weight", "bias"):
        return f"{_TOP[module]}.{tensor}"
    raise ValueError(f"'{key}' is not a key of a fairseq wav2vec 2.0 model")


def fairseq_model_config(loaded: Mapping[str, Any], what: str) -> dict[str, Any]:
    """The wav2vec 2.0 model configuration of a loaded fairseq checkpoint (``cfg.model``, or the
    legacy ``args``; a fine-tuned model's ``w2v_args``), fairseq's defaults filled in."""
    cfg = loaded.get("cfg")
    model = cfg.get("model") if isinstance(cfg, Mapping) else None
    if model is None:
        model = loaded.get("args")
    if not isinstance(model, Mapping):
        raise WeightFormatError(f"{what} holds no model configuration ('cfg' with a 'model' entry, or 'args')")
    inner = model.get("w2v_args")  # a fine-tuned model: the pre-trained encoder's configuration
    if isinstance(inner, Mapping):
        model = inner.get("model", inner)
    found = {k: model[k] for k in _DEFAULTS if model.get(k) is not None}
    return {**_DEFAULTS, **found}


MAX_CONV_LAYERS = 1000
"""Most feature-encoder layers a ``conv_feature_layers`` string may declare (wav2vec 2.0 and XLS-R have 7)."""


class _TooLong(ValueError):
    """A ``conv_feature_layers`` list longer than :data:`MAX_CONV_LAYERS` (refused before it is built)."""


def _layer_list(node: ast.AST) -> Any:
    """The literal ``node`` stands for: ints, tuples and lists joined with ``+`` and repeated with ``* n``.
    Each sum or product's length is computed before it is built, so no list beyond
    :data:`MAX_CONV_LAYERS` items is ever made (``[(1,1,1)]*64*64*64*64*64`` is 10⁹ of them)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_layer_list(n) for n in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
        left, right = _layer_list(node.left), _layer_list(node.right)
        if isinstance(node.op, ast.Add) and isinstance(left, list) and isinstance(right, list):
            return _bounded(len(left) + len(right), lambda: left + right)
        if isinstance(node.op, ast.Mult) and isinstance(left, list) and isinstance(right, int) and right >= 0:
            return _bounded(len(left) * right, lambda: left * right)
    raise ValueError


def _bounded(length: int, build: Callable[[], list]) -> list:
    if length > MAX_CONV_LAYERS:
        raise _TooLong(length)
    return build()


def _too_many(what: str, shown: str) -> WeightFormatError:
    return WeightFormatError(f"{what}: conv_feature_layers is {shown}, more than the {MAX_CONV_LAYERS} layers "
                             "a feature encoder may have")  # fmt: skip


def _conv_layers(spec: Any, what: str) -> list[tuple[int, int, int]]:
    """fairseq's ``conv_feature_layers`` (a Python expression fairseq ``eval``\\ s, e.g.
    ``"[(512, 10, 5)] + [(512, 3, 2)] * 4"``) read as literals, + and * only — never evaluated,
    and at most :data:`MAX_CONV_LAYERS` layers (counted before any list is built)."""
    if isinstance(spec, list):
        if len(spec) > MAX_CONV_LAYERS:
            raise _too_many(what, f"a list of {len(spec)} layers")
        spec = repr(spec)
    bad = WeightFormatError(f"{what}: conv_feature_layers {quoted(spec)} is not a list of (dim, kernel, stride) "
                            "tuples")  # fmt: skip
    if not isinstance(spec, str) or len(spec) > 1000:
        raise bad
    try:
        layers = _layer_list(ast.parse(spec, mode="eval").body)
    except _TooLong as exc:
        raise _too_many(what, f"{quoted(spec)}, at least {exc.args[0]} layers") from None
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise bad from None
    if not isinstance(layers, list) or not layers or not all(
        isinstance(t, tuple) and len(t) == 3 and all(isinstance(v, int) and v > 0 for v in t) for t in layers
    ):
        raise bad
    return layers


def _count(cfg: Mapping[str, Any], key: str, what: str) -> int:
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise WeightFormatError(f"{what}: the model configuration's {key} is {value!r}, not a positive integer")
    return value


def ssl_frontend_args(model_config: Mapping[str, Any], what: str = "the checkpoint") -> dict[str, Any]:
    """The ``ssl`` frontend arguments that build the architecture of a fairseq wav2vec 2.0
    configuration (:func:`fairseq_model_config`)."""
    cfg = model_config
    if cfg["layer_type"] != "transformer" or cfg["pos_conv_depth"] != 1 or cfg["quantize_input"]:
        raise WeightFormatError(f"{what}: only plain wav2vec 2.0 transformers are supported (layer_type "
                                f"{cfg['layer_type']!r}, pos_conv_depth {cfg['pos_conv_depth']}, quantize_input "
                                f"{cfg['quantize_input']})")  # fmt: skip
    if cfg["extractor_mode"] not in ("default", "layer_norm"):
        raise WeightFormatError(f"{what}: unknown extractor_mode {cfg['extractor_mode']!r}")
    layers = _conv_layers(cfg["conv_feature_layers"], what)
    return {
        "model_type": "wav2vec2",
        "hidden_size": _count(cfg, "encoder_embed_dim", what),
        "num_hidden_layers": _count(cfg, "encoder_layers", what),
        "num_attention_heads": _count(cfg, "encoder_attention_heads", what),
        "intermediate_size": _count(cfg, "encoder_ffn_embed_dim", what),
        "conv_dim": [d for d, _, _ in layers],
        "conv_kernel": [k for _, k, _ in layers],
        "conv_stride": [s for _, _, s in layers],
        "num_conv_pos_embeddings": _count(cfg, "conv_pos", what),
        "num_conv_pos_embedding_groups": _count(cfg, "conv_pos_groups", what),
        "extra_config": {
            "feat_extract_norm": "layer" if cfg["extractor_mode"] == "layer_norm" else "group",
            "do_stable_layer_norm": bool(cfg["layer_norm_first"]),
            "conv_bias": bool(cfg["conv_bias"]),
            "hidden_act": str(cfg["activation_fn"]),
        },
    }


@register_checkpoint_format("fairseq_wav2vec2")
class FairseqWav2Vec2(CheckpointFormat):
    """A fairseq wav2vec 2.0 / XLS-R checkpoint (``xlsr2_300m.pt``, ``wav2vec_small.pt`` …; a
    fine-tuned CTC one too) into an ``ssl`` frontend with the same architecture, read without
    fairseq and without running anything from the file (argparse/omegaconf configurations are
    admitted as plain data; any other pickled object is refused).

    Args:
        stage: name of the ``ssl`` stage in the model (``frontend`` in a chain).
        layers: keep only the file's first N transformer layers (for an ssl frontend built with
            layer: N, which drops the layers above); None: all of them.
        mask_emb: load the file's mask embedding too (only an ssl frontend built with
            apply_spec_augment: true has one; otherwise it is left out with the pre-training heads).
    """

    published = "fairseq's wav2vec 2.0 / XLS-R files, e.g. https://dl.fbaipublicfiles.com/fairseq/wav2vec/xlsr2_300m.pt"

    def __init__(self, stage: str = "frontend", layers: Optional[int] = None, mask_emb: bool = False):
        if layers is not None and (isinstance(layers, bool) or layers < 0):
            raise ValueError(f"layers must be a number of transformer layers (>= 0) or None, got {layers!r}")
        self.stage, self.layers, self.mask_emb = stage, layers, mask_emb

    def read(self, path: Path, map_location: str = "cpu") -> Any:
        return read_with_configs(path, map_location=map_location)

    @classmethod
    def recognises(cls, loaded: Any, path: Path) -> bool:
        model = loaded.get("model") if isinstance(loaded, Mapping) else None
        return (
            isinstance(model, Mapping)
            and ("cfg" in loaded or "args" in loaded)
            and any(str(k).startswith(("feature_extractor.conv_layers.", _FINE_TUNED)) for k in model)
        )

    def _kept(self, name: str) -> bool:
        """Whether transformers key ``name`` goes into the frontend (``mask_emb`` and ``layers`` say)."""
        if name == "masked_spec_embed":
            return self.mask_emb
        layer = re.match(r"encoder\.layers\.(\d+)\.", name)
        return not (layer and self.layers is not None and int(layer.group(1)) >= self.layers)

    def check_model(self, model: Any, loaded: Any, path: Path) -> None:
        """Refuse an ``ssl`` stage whose configuration differs from the file's in what the tensors
        do not show (strides, heads, norm placement, activation…), naming each field and value."""
        wanted = ssl_frontend_args(fairseq_model_config(loaded, str(path)), str(path))
        parts = getattr(model, "parts", None)
        stage = parts[self.stage] if parts is not None and self.stage in parts else None
        config = getattr(getattr(stage, "model", None), "config", None)
        if config is None:
            raise WeightFormatError(f"{path}: the model has no ssl stage {self.stage!r} to load a fairseq wav2vec 2.0 "
                                    "into (format arg stage: names it)")  # fmt: skip
        expected = {k: v for k, v in wanted.items() if k not in ("model_type", "extra_config", "num_hidden_layers")}
        expected.update(wanted["extra_config"])
        differ = []
        for key, value in expected.items():
            have = getattr(config, key, None)
            have = list(have) if isinstance(have, (list, tuple)) else have
            if have != value:
                differ.append(f"{key} {have!r} (the file's: {value!r})")
        if differ:
            raise WeightFormatError(
                f"{path}: the ssl frontend {self.stage!r} is not the file's architecture: " + "; ".join(differ)
                + f"; build it with the file's arguments: {wanted}"
            )

    def convert(self, loaded: Any, path: Path) -> dict[str, Any]:
        if not isinstance(loaded, Mapping) or "model" not in loaded:
            raise WeightFormatError(f"{path} is not a fairseq checkpoint (a dict with 'model' and 'cfg' or 'args')")
        args = ssl_frontend_args(fairseq_model_config(loaded, str(path)), str(path))
        log.info("%s: a fairseq wav2vec 2.0 with ssl frontend arguments %s", path, args)
        state = tensors_of(loaded["model"], what=f"the model in {path}")
        if any(k.startswith(_FINE_TUNED) for k in state):  # fine-tuned: the encoder, not the CTC projection
            state = {k[len(_FINE_TUNED) :]: v for k, v in state.items() if k.startswith(_FINE_TUNED)}
        out, left = {}, 0
        prefix = f"parts.{self.stage}.model."
        for key, value in state.items():
            try:
                name = fairseq_to_hf_key(key)
            except ValueError as exc:
                raise WeightFormatError(f"{path}: {exc}") from None
            if name is None or not self._kept(name):
                left += 1
                continue
            out[prefix + name] = value
        if prefix + "feature_projection.projection.weight" not in out:  # fairseq skips it when widths agree
            width = args["hidden_size"]
            out[prefix + "feature_projection.projection.weight"] = torch.eye(width)
            out[prefix + "feature_projection.projection.bias"] = torch.zeros(width)
        if left:
            log.info("%s: left out %d tensors (pre-training heads, mask embedding%s)", path, left,
                     f", transformer layers above the first {self.layers}" if self.layers is not None else "")  # fmt: skip
        return out
