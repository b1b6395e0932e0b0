"""``ssl`` — a self-supervised speech model (wav2vec 2.0, HuBERT, WavLM) from ``transformers`` as a frontend.

Baevski et al., "wav2vec 2.0" (NeurIPS 2020); Hsu et al., "HuBERT" (TASLP 2021); Chen et
al., "WavLM" (JSTSP 2022). Fine-tuned SSL front-ends are the strongest spoofing
countermeasure front-ends (Tak et al., "Automatic speaker verification spoofing and deepfake
detection using wav2vec 2.0 and data augmentation", Odyssey 2022). The features are one
hidden layer of the transformer, or — as in SUPERB (Yang et al., Interspeech 2021) — a
learnable softmax-weighted sum of all of them.

The model comes from a **local** directory written by ``save_pretrained`` (``path``; nothing
is ever downloaded: ``local_files_only=True``), or is randomly initialised from a named
architecture and size (``model_type`` and the size arguments; the defaults are a tiny model
for tests). ``transformers`` is an optional dependency: ``pip install modforge[ssl]``.

A model folder is data, never code (``path`` may come from a stored config or an artifact's
metadata): a ``config.json`` that asks for the folder's own Python (an ``auto_map``, or a
``model_type`` that only such code would define) is refused with one error naming the folder
before ``transformers`` sees it — ``transformers`` would otherwise ask "run the custom code?
[y/N]" on a terminal — and every load passes ``trust_remote_code=False`` as well.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn as nn

from ...core.constraints import PositiveInt, Probability
from ...core.registries import register_checkpoint_format, register_frontend
from ...core.safe_files import write_atomic
from ...core.weight_formats import CheckpointFormat, tensors_of
from ..base import Frontend
from ..layouts import Layout
from ..weight_files import HUB_WEIGHT_FILES, hub_weights_file
from .waveform import check_waveform

__all__ = ["HuggingFaceSSL", "SSLFrontend"]

ModelType = Literal["wav2vec2", "wavlm", "hubert"]
PREPROCESSOR_FILE = "preprocessor_config.json"


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise ImportError("the 'ssl' frontend needs the transformers library: pip install modforge[ssl]") from None
    return transformers


def _first_line(exc: BaseException) -> str:
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)


@register_frontend("ssl")
class SSLFrontend(Frontend):
    """A wav2vec 2.0 / HuBERT / WavLM model; features from one layer or a learnable weighted sum of all.

    Args:
        path: local directory holding a pretrained model (config.json and the weights, as written
            by save_pretrained); nothing is downloaded. When given, model_type and the size
            arguments are ignored.
        model_type: architecture of a randomly initialised model (no path): 'wav2vec2', 'wavlm'
            or 'hubert'.
        hidden_size: transformer width (random initialisation).
        num_hidden_layers: transformer layers (random initialisation).
        num_attention_heads: attention heads (random initialisation).
        intermediate_size: feed-forward width (random initialisation).
        conv_dim: channels of each convolutional feature-encoder layer (random initialisation).
        conv_kernel: kernel size of each feature-encoder layer (random initialisation).
        conv_stride: stride of each feature-encoder layer; their product is the frame hop
            (random initialisation; 320 = 20 ms at 16 kHz, as the real models).
        num_conv_pos_embeddings: kernel of the convolutional position embedding (random initialisation).
        num_conv_pos_embedding_groups: groups of the convolutional position embedding (random initialisation).
        extra_config: further transformers config keys for a random initialisation
            (e.g. {do_stable_layer_norm: true, feat_extract_norm: layer}).
        layer: which hidden state to return: 0 is the transformer's input, k the output of
            layer k, negative counts from the end (-1: the last); the layers above k are
            dropped (never run; for pre-LN 'stable layer norm' models such as the large ones the
            encoder's final layer norm then applies to layer k). 'weighted': a learnable
            softmax-weighted sum of all hidden states (SUPERB; the last one as the encoder
            returns it).
        freeze: keep the SSL model's weights fixed (and in eval mode); the layer weights still learn.
        freeze_feature_encoder: keep only the convolutional feature encoder fixed.
        normalize: zero-mean, unit-variance normalise each waveform first (as the model's feature
            extractor does; default: the saved preprocessor_config.json's do_normalize, else off).
        apply_spec_augment: the model's SpecAugment-style time masking in train mode (overrides
            the loaded config; off by default).
        layerdrop: probability of skipping a transformer layer in train mode (overrides the
            loaded config).
        sample_rate: sample rate of the input in Hz (wired by the builder); must match the
            pretrained model's.
        in_dim: input size (1 for a waveform; wired by the builder).

    Not scriptable by ``torch.jit.script``: the Hugging Face model inside it is not written for
    TorchScript (its config classes have no retrievable source). The ``torchscript`` engine traces
    it instead, with a warning (see the engines table in the README).
    """

    produces = Layout.SEQUENCE
    out_dim_rule = "hidden_size of the model (the loaded config's when path is given)"

    def __init__(
        self,
        path: str | None = None,
        model_type: ModelType = "wav2vec2",
        hidden_size: PositiveInt = 32,
        num_hidden_layers: PositiveInt = 2,
        num_attention_heads: PositiveInt = 2,
        intermediate_size: PositiveInt = 64,
        conv_dim: tuple[PositiveInt, ...] = (32, 32, 32),
        conv_kernel: tuple[PositiveInt, ...] = (10, 8, 4),
        conv_stride: tuple[PositiveInt, ...] = (5, 8, 8),
        num_conv_pos_embeddings: PositiveInt = 16,
        num_conv_pos_embedding_groups: PositiveInt = 2,
        extra_config: dict[str, Any] | None = None,
        layer: int | Literal["weighted"] = -1,
        freeze: bool = False,
        freeze_feature_encoder: bool = False,
        normalize: bool | None = None,
        apply_spec_augment: bool = False,
        layerdrop: Probability = 0.0,
        sample_rate: PositiveInt = 16000,
        in_dim: int = 1,
    ):
        super().__init__()
        transformers = _transformers()
        if not 0.0 <= layerdrop < 1.0:
            raise ValueError(f"layerdrop must be in [0, 1), got {layerdrop}")
        if path is not None:
            model, saved = _load_pretrained(transformers, path, sample_rate)
            normalize = saved.get("do_normalize", False) if normalize is None else normalize
        else:
            settings = {
                "hidden_size": hidden_size,
                "num_hidden_layers": num_hidden_layers,
                "num_attention_heads": num_attention_heads,
                "intermediate_size": intermediate_size,
                "conv_dim": tuple(conv_dim),
                "conv_kernel": tuple(conv_kernel),
                "conv_stride": tuple(conv_stride),
                "num_conv_pos_embeddings": num_conv_pos_embeddings,
                "num_conv_pos_embedding_groups": num_conv_pos_embedding_groups,
                "mask_time_prob": 0.05 if apply_spec_augment else 0.0,
            }
            model = _random_model(transformers, model_type, {**settings, **(extra_config or {})})
        config = model.config
        config.apply_spec_augment, config.layerdrop = apply_spec_augment, float(layerdrop)
        if getattr(model, "masked_spec_embed", None) is not None and not apply_spec_augment:
            model.masked_spec_embed.requires_grad_(False)  # used only by the time masking
        # transformers sets requires_grad on the encoder's input view in train mode (for gradient
        # checkpointing), which fails when the waveform itself requires grad; we never checkpoint
        model.feature_extractor._requires_grad = False
        n_layers = len(model.encoder.layers)
        self.weighted = layer == "weighted"
        if self.weighted:
            self.layer_weights = nn.Parameter(torch.zeros(n_layers + 1))
            self.layer = n_layers
        else:
            if isinstance(layer, bool) or not isinstance(layer, int) or not -(n_layers + 1) <= layer <= n_layers:
                raise ValueError(
                    f"layer must be 'weighted' or an integer from {-(n_layers + 1)} to {n_layers} "
                    f"(the model has {n_layers} transformer layers), got {layer!r}"
                )
            self.layer = layer % (n_layers + 1)
            if self.layer < n_layers:  # the layers above the chosen one are never needed
                model.encoder.layers = nn.ModuleList(list(model.encoder.layers)[: self.layer])
                config.num_hidden_layers = self.layer
        self.model = model
        self.frozen = freeze
        if freeze:
            model.requires_grad_(False)
            model.eval()
        elif freeze_feature_encoder:
            model.feature_extractor.requires_grad_(False)
        self.normalize = bool(normalize)
        self.sample_rate = sample_rate
        self.min_length = _receptive_field(config.conv_kernel, config.conv_stride)
        self.out_dim = int(config.hidden_size)

    def train(self, mode: bool = True) -> SSLFrontend:
        """Train/eval mode; a frozen SSL model stays in eval mode (no dropout, no masking)."""
        super().train(mode)
        if self.frozen:
            self.model.eval()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = check_waveform(x, self.min_length, "ssl")
        if self.normalize:
            mean = x.mean(dim=-1, keepdim=True)
            x = (x - mean) / torch.sqrt(x.var(dim=-1, keepdim=True, unbiased=False) + 1e-7)
        if not self.weighted:
            return self.model(x).last_hidden_state
        out = self.model(x, output_hidden_states=True)
        # the last state as the encoder returns it (pre-LN models apply their final layer norm to it)
        states = torch.stack(list(out.hidden_states[:-1]) + [out.last_hidden_state])  # [L + 1, B, T, H]
        weights = torch.softmax(self.layer_weights, dim=0)
        return (weights.view(-1, 1, 1, 1) * states).sum(dim=0)

    def layer_weight_values(self) -> torch.Tensor:
        """The softmax-normalised layer weights (``layer='weighted'``), one per hidden state."""
        if not self.weighted:
            raise ValueError("this ssl frontend returns one layer; build it with layer='weighted' for layer weights")
        return torch.softmax(self.layer_weights.detach(), dim=0)

    def save_pretrained(self, path: str | Path) -> Path:
        """Write the SSL model (as its layers are now, dropped layers excluded) and a
        ``preprocessor_config.json`` (sample rate, normalisation) to ``path``, loadable with ``path=``."""
        out = Path(path)
        self.model.save_pretrained(str(out))
        preprocessor = {
            "feature_extractor_type": "Wav2Vec2FeatureExtractor",
            "feature_size": 1,
            "sampling_rate": self.sample_rate,
            "do_normalize": self.normalize,
            "padding_value": 0.0,
            "return_attention_mask": False,
        }
        write_atomic(out / PREPROCESSOR_FILE, json.dumps(preprocessor, indent=2) + "\n")
        return out


def _random_model(transformers: Any, model_type: str, settings: dict[str, Any]) -> nn.Module:
    if model_type not in ("wav2vec2", "wavlm", "hubert"):
        raise ValueError(f"unknown model_type '{model_type}': expected 'wav2vec2', 'wavlm' or 'hubert'")
    if not settings["conv_dim"] or not len(settings["conv_dim"]) == len(settings["conv_kernel"]) == len(
        settings["conv_stride"]
    ):
        raise ValueError(
            "conv_dim, conv_kernel and conv_stride must be non-empty and of the same length (one entry per "
            f"feature-encoder layer), got {len(settings['conv_dim'])}, {len(settings['conv_kernel'])}, "
            f"{len(settings['conv_stride'])}"
        )
    if settings["hidden_size"] % settings["num_attention_heads"]:
        raise ValueError(
            f"hidden_size ({settings['hidden_size']}) must be a multiple of num_attention_heads "
            f"({settings['num_attention_heads']})"
        )
    try:
        config = transformers.AutoConfig.for_model(model_type, **settings)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"bad ssl config for '{model_type}': {_first_line(exc)}") from None
    return transformers.AutoModel.from_config(config, trust_remote_code=False)


def _load_pretrained(transformers: Any, path: str, sample_rate: int) -> tuple[nn.Module, dict[str, Any]]:
    folder = Path(path).expanduser()
    if not (folder / "config.json").is_file():
        raise ValueError(
            f"no pretrained SSL model at '{path}': expected a local directory holding config.json and the "
            "weights (model.safetensors or pytorch_model.bin), as written by save_pretrained"
        )
    _refuse_remote_code(transformers, folder / "config.json", path)
    try:
        model = transformers.AutoModel.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001 - transformers raises many types for a broken folder
        raise ValueError(f"could not load the pretrained SSL model at '{path}': {_first_line(exc)}") from None
    if not (hasattr(model, "feature_extractor") and hasattr(getattr(model, "encoder", None), "layers")):
        raise ValueError(
            f"the model at '{path}' is a '{model.config.model_type}', not a wav2vec2/HuBERT/WavLM-style "
            "speech model (convolutional feature encoder + transformer encoder)"
        )
    saved: dict[str, Any] = {}
    preprocessor = folder / PREPROCESSOR_FILE
    if preprocessor.is_file():
        try:
            saved = json.loads(preprocessor.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise ValueError(f"unreadable {preprocessor}: {_first_line(exc)}") from None
        if not isinstance(saved, dict):
            raise ValueError(f"{preprocessor} is not a JSON object (expected the feature extractor's settings)")
    expected = saved.get("sampling_rate")
    if expected is not None and (isinstance(expected, bool) or not isinstance(expected, (int, float))):
        raise ValueError(f"{preprocessor}: sampling_rate must be a number of Hz, got {expected!r}")
    if expected is not None and int(expected) != sample_rate:
        raise ValueError(
            f"the SSL model at '{path}' expects {expected} Hz audio but sample_rate is {sample_rate}; resample the data"
        )
    return model, saved


def _refuse_remote_code(transformers: Any, config_file: Path, path: str) -> None:
    """Refuse a model folder whose ``config.json`` needs code from the folder itself.

    ``transformers`` runs a folder's own ``.py`` files for an ``auto_map`` entry, or asks
    whether to (on a terminal); a ``model_type`` it does not know can only come with such
    code. Both are one error naming the folder, raised before ``transformers`` reads it."""
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"unreadable {config_file} of the pretrained SSL model at '{path}': "
                         f"{_first_line(exc)}") from None  # fmt: skip
    if not isinstance(config, dict):
        raise ValueError(f"{config_file} of the pretrained SSL model at '{path}' is not a JSON object")
    if "auto_map" in config:
        raise ValueError(
            f"the pretrained SSL model at '{path}' asks to run its own code (config.json has an 'auto_map'); "
            "modforge never runs code from a model folder — use a folder whose config.json names a model_type "
            "built into transformers (wav2vec2, hubert, wavlm) and no auto_map"
        )
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in transformers.CONFIG_MAPPING:
        raise ValueError(
            f"the pretrained SSL model at '{path}' has model_type {model_type!r} in config.json, which transformers "
            "does not define (only the folder's own code could); modforge never runs code from a model folder — "
            "expected a built-in speech model_type such as wav2vec2, hubert or wavlm"
        )


def _receptive_field(kernels: Any, strides: Any) -> int:
    """Samples needed for one output frame of the convolutional feature encoder."""
    length = 1
    for kernel, stride in reversed(list(zip(kernels, strides, strict=True))):
        length = (length - 1) * int(stride) + int(kernel)
    return length


# ------------------------------------------------------------ checkpoint format
_PRETRAINING_HEADS = ("quantizer.", "project_q.", "project_hid.", "lm_head.", "final_proj.", "label_embeddings_concat")


@register_checkpoint_format("hf_wav2vec2")
class HuggingFaceSSL(CheckpointFormat):
    """A Hugging Face wav2vec 2.0 / XLS-R / HuBERT / WavLM folder (``config.json`` and
    ``model.safetensors`` or ``pytorch_model.bin``, as ``save_pretrained`` writes it) into an
    ``ssl`` frontend built with the same architecture — e.g. to start from XLS-R while the
    config spells the size out.

    Keys saved from a pre-training or CTC model carry a ``wav2vec2.`` (``hubert.``, ``wavlm.``)
    prefix, which is removed; that model's own heads (quantizer, projections, CTC head) have no
    place in a frontend and are left out, with a log line naming how many. Anything else that
    does not fit is reported by ``model.init`` like any other key.

    Args:
        stage: name of the ``ssl`` stage in the model (``frontend`` in a chain).
    """

    def __init__(self, stage: str = "frontend"):
        self.stage = stage

    def locate(self, path: Path) -> Path:
        return hub_weights_file(path, f"holds no {' or '.join(HUB_WEIGHT_FILES)}: not a Hugging Face model folder")

    @classmethod
    def recognises_folder(cls, path: Path) -> bool:
        return (path / "config.json").is_file() and any((path / name).is_file() for name in HUB_WEIGHT_FILES)

    @classmethod
    def recognises(cls, loaded: Any, path: Path) -> bool:
        marker = "feature_extractor.conv_layers."
        return (
            isinstance(loaded, dict)
            and (path.parent / "config.json").is_file()
            and any(str(k).startswith(marker) or f".{marker}" in str(k) for k in loaded)
        )

    def convert(self, loaded: Any, path: Path) -> dict[str, Any]:
        state = tensors_of(loaded, what=f"the model in {path}")
        out, heads = {}, 0
        for key, value in state.items():
            inner = key.split(".", 1)[1] if key.split(".", 1)[0] in ("wav2vec2", "hubert", "wavlm") else key
            if inner.startswith(_PRETRAINING_HEADS):
                heads += 1
                continue
            out[f"parts.{self.stage}.model.{inner}"] = value
        if heads:
            logging.getLogger("modforge.model").info(
                "%s: left out %d tensors of the pre-training/CTC heads", path, heads
            )
        return out
