"""The ``fairseq_wav2vec2`` checkpoint format: a fabricated fairseq wav2vec 2.0 file (fairseq's layout,
its pickled argparse/omegaconf configuration) loads into the ``ssl`` frontend and computes what the
Hugging Face model with the same weights computes; a hostile file is refused and runs nothing."""

from __future__ import annotations

import argparse
import os
import re
import sys
import types
from pathlib import Path

import pytest
import torch

import modforge as mf
from modforge.components.frontends.fairseq_weights import fairseq_model_config, ssl_frontend_args
from modforge.core.errors import ConfigError
from modforge.core.restricted_pickle import read_with_configs
from modforge.core.weight_formats import UnsafeFileError

transformers = pytest.importorskip("transformers")

# two tiny fairseq architectures: wav2vec 2.0 base's layout and XLS-R's (layer-norm extractor, pre-LN, conv bias)
BASE = {"_name": "wav2vec2", "extractor_mode": "default", "layer_norm_first": False, "conv_bias": False}
XLSR = {"_name": "wav2vec2", "extractor_mode": "layer_norm", "layer_norm_first": True, "conv_bias": True}
SIZE = {"encoder_layers": 2, "encoder_embed_dim": 32, "encoder_ffn_embed_dim": 64, "encoder_attention_heads": 4,
        "conv_feature_layers": "[(24, 10, 5)] + [(24, 3, 2)] * 2 + [(24, 2, 2)]", "conv_pos": 16,
        "conv_pos_groups": 4, "final_dim": 16, "activation_fn": "gelu"}  # fmt: skip


def hf_twin(model_cfg: dict) -> torch.nn.Module:
    """The transformers model of ``model_cfg``, every weight random (norms and biases too)."""
    config = transformers.Wav2Vec2Config(
        hidden_size=32, num_hidden_layers=2, intermediate_size=64, num_attention_heads=4,
        conv_dim=(24, 24, 24, 24), conv_kernel=(10, 3, 3, 2), conv_stride=(5, 2, 2, 2),
        num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
        feat_extract_norm="layer" if model_cfg["extractor_mode"] == "layer_norm" else "group",
        do_stable_layer_norm=model_cfg["layer_norm_first"], conv_bias=model_cfg["conv_bias"],
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.Wav2Vec2Model(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def to_fairseq(hf_state: dict[str, torch.Tensor], layer_norm_extractor: bool) -> dict[str, torch.Tensor]:
    """transformers' names → fairseq's (the inverse of the format's map, written out independently)."""
    layer = {"attention.q_proj": "self_attn.q_proj", "attention.k_proj": "self_attn.k_proj",
             "attention.v_proj": "self_attn.v_proj", "attention.out_proj": "self_attn.out_proj",
             "layer_norm": "self_attn_layer_norm", "feed_forward.intermediate_dense": "fc1",
             "feed_forward.output_dense": "fc2", "final_layer_norm": "final_layer_norm"}  # fmt: skip
    out = {}
    for key, value in hf_state.items():
        if key == "masked_spec_embed":
            name = "mask_emb"
        elif m := re.fullmatch(r"feature_extractor\.conv_layers\.(\d+)\.(conv|layer_norm)\.(\w+)", key):
            norm = "2.1" if layer_norm_extractor else "2"
            name = f"feature_extractor.conv_layers.{m[1]}.{'0' if m[2] == 'conv' else norm}.{m[3]}"
        elif m := re.fullmatch(r"encoder\.layers\.(\d+)\.(.+)\.(weight|bias)", key):
            name = f"encoder.layers.{m[1]}.{layer[m[2]]}.{m[3]}"
        else:
            name = {"feature_projection.layer_norm.weight": "layer_norm.weight",
                    "feature_projection.layer_norm.bias": "layer_norm.bias",
                    "feature_projection.projection.weight": "post_extract_proj.weight",
                    "feature_projection.projection.bias": "post_extract_proj.bias",
                    "encoder.pos_conv_embed.conv.bias": "encoder.pos_conv.0.bias",
                    "encoder.pos_conv_embed.conv.parametrizations.weight.original0": "encoder.pos_conv.0.weight_g",
                    "encoder.pos_conv_embed.conv.parametrizations.weight.original1": "encoder.pos_conv.0.weight_v",
                    "encoder.layer_norm.weight": "encoder.layer_norm.weight",
                    "encoder.layer_norm.bias": "encoder.layer_norm.bias"}[key]  # fmt: skip
        out[name] = value.clone()
    # the pre-training heads a released checkpoint carries
    out.update({"quantizer.vars": torch.randn(1, 8, 16), "quantizer.weight_proj.weight": torch.randn(8, 24),
                "quantizer.weight_proj.bias": torch.randn(8), "project_q.weight": torch.randn(16, 16),
                "project_q.bias": torch.randn(16), "final_proj.weight": torch.randn(16, 32),
                "final_proj.bias": torch.randn(16)})  # fmt: skip
    return out


def write_checkpoint(path: Path, model_cfg: dict, state: dict, how: str) -> Path:
    """A fairseq-style checkpoint: the configuration as omegaconf objects, a plain dict, or legacy argparse args."""
    content: dict = {"model": state, "optimizer_history": [{"num_updates": 10}], "extra_state": {"epoch": 3}}
    if how == "omegaconf":
        omegaconf = pytest.importorskip("omegaconf")
        content["cfg"] = omegaconf.OmegaConf.create({"model": model_cfg, "task": {"_name": "audio_pretraining",
                                                                                  "sample_rate": 16000}})  # fmt: skip
        content["args"] = None
    elif how == "dict":
        content["cfg"] = {"model": model_cfg, "task": {"_name": "audio_pretraining"}}
    else:
        content["args"] = argparse.Namespace(arch="wav2vec2", **{k: v for k, v in model_cfg.items() if k != "_name"})
    torch.save(content, path)
    return path


def ssl_section(model_cfg: dict, **init) -> dict:
    args = ssl_frontend_args(fairseq_model_config({"cfg": {"model": model_cfg}}, "test"))
    section = {"frontend": {"type": "ssl", "args": args}, "backbone": "mlp", "head": "linear"}
    return {**section, "init": init} if init else section


def build(section: dict) -> torch.nn.Module:
    return mf.build_model(section, in_dim=1, num_classes=2, layout="waveform", input_shape=[4000])


@pytest.mark.parametrize("how", ["omegaconf", "dict", "args"])
@pytest.mark.parametrize("arch", [BASE, XLSR], ids=["base", "xlsr"])
def test_a_fairseq_checkpoint_computes_what_the_hugging_face_model_computes(tmp_path, arch, how):
    model_cfg = {**arch, **SIZE}
    twin = hf_twin(model_cfg)
    file = write_checkpoint(tmp_path / "w2v.pt", model_cfg, to_fairseq(twin.state_dict(),
                            arch["extractor_mode"] == "layer_norm"), how)  # fmt: skip
    model = build(ssl_section(model_cfg, path=str(file), format="fairseq_wav2vec2", part="frontend")).eval()
    assert model.init_records[0]["format"] == "fairseq_wav2vec2"
    x = torch.randn(3, 4000, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = twin(x).last_hidden_state
        got = model.stage("frontend")(x)
    assert got.shape == expected.shape
    assert (got - expected).abs().max().item() <= 1e-5


def test_the_configuration_comes_out_as_plain_data(tmp_path):
    model_cfg = {**XLSR, **SIZE}
    file = write_checkpoint(tmp_path / "w2v.pt", model_cfg, to_fairseq(hf_twin(model_cfg).state_dict(), True),
                            "omegaconf")  # fmt: skip
    loaded = read_with_configs(file)
    assert loaded["cfg"] == {"model": model_cfg, "task": {"_name": "audio_pretraining", "sample_rate": 16000}}
    assert type(loaded["cfg"]["model"]) is dict and loaded["extra_state"] == {"epoch": 3}


def test_a_fine_tuned_checkpoint_gives_its_encoder(tmp_path, monkeypatch):
    model_cfg = {**BASE, **SIZE}
    twin = hf_twin(model_cfg)
    state = {f"w2v_encoder.w2v_model.{k}": v for k, v in to_fairseq(twin.state_dict(), False).items()}
    state.update({"w2v_encoder.proj.weight": torch.randn(10, 32), "w2v_encoder.proj.bias": torch.randn(10)})
    module = types.ModuleType("fairseq.data.dictionary")  # a CTC model's task_state pickles its target Dictionary
    module.Dictionary = type("Dictionary", (), {"__module__": "fairseq.data.dictionary"})
    for name in ("fairseq", "fairseq.data"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "fairseq.data.dictionary", module)
    dictionary = module.Dictionary()
    dictionary.symbols, dictionary.indices = ["<s>", "A"], {"<s>": 0, "A": 1}
    file = tmp_path / "ctc.pt"
    torch.save({"model": state, "cfg": {"model": {"_name": "wav2vec_ctc", "w2v_args": {"model": model_cfg}}},
                "task_state": {"target_dictionary": dictionary}}, file)  # fmt: skip
    for name in ("fairseq", "fairseq.data", "fairseq.data.dictionary"):
        monkeypatch.delitem(sys.modules, name)  # read without the class: nothing of fairseq is imported
    assert read_with_configs(file)["task_state"] == {"target_dictionary": None}
    model = build(ssl_section(model_cfg, path=str(file), format="fairseq_wav2vec2", part="frontend")).eval()
    x = torch.randn(2, 4000)
    with torch.no_grad():
        assert torch.allclose(model.stage("frontend")(x), twin(x).last_hidden_state, atol=1e-5)


def test_a_different_architecture_is_reported_not_loaded(tmp_path):
    model_cfg = {**BASE, **SIZE}
    file = write_checkpoint(tmp_path / "w2v.pt", model_cfg, to_fairseq(hf_twin(model_cfg).state_dict(), False), "dict")
    wider = {**model_cfg, "encoder_embed_dim": 48, "encoder_attention_heads": 4}
    with pytest.raises(ConfigError, match=r"not the file's architecture: hidden_size 48 \(the file's: 32\)"):
        build(ssl_section(wider, path=str(file), format="fairseq_wav2vec2", part="frontend"))


@pytest.mark.parametrize(("change", "named"), [
    ({"encoder_attention_heads": 2}, "num_attention_heads 2 (the file's: 4)"),
    ({"conv_feature_layers": "[(24, 10, 4)] + [(24, 3, 2)] * 2 + [(24, 2, 2)]"}, "conv_stride [4, 2, 2, 2] (the file's: [5, 2, 2, 2])"),
    ({"layer_norm_first": True}, "do_stable_layer_norm True (the file's: False)"),
    ({"activation_fn": "relu"}, "hidden_act 'relu' (the file's: 'gelu')"),
])  # fmt: skip
def test_what_the_shapes_do_not_show_is_compared_before_loading(tmp_path, change, named):
    """Heads, strides, norm placement and activation leave every tensor's shape as it is: a
    frontend built otherwise would load and compute something else, so it is refused."""
    model_cfg = {**BASE, **SIZE}
    file = write_checkpoint(tmp_path / "w2v.pt", model_cfg, to_fairseq(hf_twin(model_cfg).state_dict(), False), "dict")
    with pytest.raises(ConfigError, match="not the file's architecture") as caught:
        build(ssl_section({**model_cfg, **change}, path=str(file), format="fairseq_wav2vec2", part="frontend"))
    assert named in str(caught.value) and "build it with the file's arguments" in str(caught.value)


class _Payload:
    """Unpickling this creates the marker file (as a hostile checkpoint would run anything)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').close()",))


@pytest.mark.parametrize("where", ["cfg", "model"])
def test_a_hostile_fairseq_file_is_refused_and_runs_nothing(tmp_path, where):
    model_cfg = {**XLSR, **SIZE}
    state = to_fairseq(hf_twin(model_cfg).state_dict(), True)
    marker = tmp_path / "marker"
    file = write_checkpoint(tmp_path / "hostile.pt", model_cfg, state, "dict")
    content = torch.load(file, weights_only=True)
    if where == "cfg":
        content["cfg"]["model"]["w2v_args"] = _Payload(marker)
    else:
        content["model"]["mask_emb"] = _Payload(marker)
    torch.save(content, file)
    torch.load(file, weights_only=False)  # the file really is hostile: plain unpickling runs it
    assert marker.exists()
    marker.unlink()
    with pytest.raises(UnsafeFileError, match=r"refused to load .*hostile\.pt: it references exec"):
        read_with_configs(file)
    with pytest.raises(ConfigError, match=r"hostile\.pt.*references exec.*nothing in it was executed"):
        build(ssl_section(model_cfg, path=str(file), format="fairseq_wav2vec2", part="frontend"))
    with pytest.raises(ConfigError, match=r"hostile\.pt.*references exec"):  # format: auto tries every reader
        build(ssl_section(model_cfg, path=str(file), part="frontend"))
    assert not marker.exists()


def test_conv_feature_layers_is_parsed_never_evaluated(tmp_path):
    marker = tmp_path / "marker"
    model_cfg = {**BASE, **SIZE, "conv_feature_layers": f"[open({str(marker)!r}, 'w')]"}
    with pytest.raises(Exception, match="conv_feature_layers .* is not a list of"):
        ssl_frontend_args(fairseq_model_config({"cfg": {"model": model_cfg}}, "test"))
    assert not marker.exists()
    assert ssl_frontend_args(fairseq_model_config({"args": {}}, "defaults"))["conv_stride"] == [5, 2, 2, 2, 2, 2, 2]


def test_the_recipe_config_names_the_format():
    import yaml

    recipe = Path(__file__).parents[1] / "configs" / "spoofing" / "ssl_aasist_xlsr.yaml"
    model = yaml.safe_load(recipe.read_text())["model"]
    assert model["init"]["format"] == "fairseq_wav2vec2" and model["frontend"]["type"] == "ssl"
    assert os.path.basename(model["init"]["path"]) == "xlsr2_300m.pt"
    xlsr = {**_XLSR_300M_CFG}
    assert {k: v for k, v in model["frontend"]["args"].items() if k in xlsr} == xlsr


# what ssl_frontend_args gives for XLS-R 300M's published configuration (fairseq examples/wav2vec/xlsr)
_XLSR_300M_CFG = {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096,
                  "conv_dim": [512] * 7, "conv_kernel": [10, 3, 3, 3, 3, 2, 2], "conv_stride": [5, 2, 2, 2, 2, 2, 2],
                  "num_conv_pos_embeddings": 128, "num_conv_pos_embedding_groups": 16,
                  "extra_config": {"feat_extract_norm": "layer", "do_stable_layer_norm": True, "conv_bias": True,
                                   "hidden_act": "gelu"}}  # fmt: skip


def test_layers_keeps_the_first_transformer_layers_for_an_ssl_layer_choice(tmp_path, caplog):
    model_cfg = {**XLSR, **SIZE}
    twin = hf_twin(model_cfg)
    file = write_checkpoint(tmp_path / "w2v.pt", model_cfg, to_fairseq(twin.state_dict(), True), "omegaconf")
    section = ssl_section(model_cfg)
    section["frontend"]["args"]["layer"] = 1
    with pytest.raises(ConfigError, match="file keys the model does not have: parts.frontend.model.encoder.layers.1"):
        build({**section, "init": {"path": str(file), "format": "fairseq_wav2vec2", "part": "frontend"}})
    fmt = {"type": "fairseq_wav2vec2", "args": {"layers": 1}}
    with caplog.at_level("INFO", logger="modforge.model"):
        model = build({**section, "init": {"path": str(file), "format": fmt, "part": "frontend"}}).eval()
    assert "transformer layers above the first 1" in caplog.text
    x = torch.randn(2, 4000)
    with torch.no_grad():  # pre-LN: the encoder's final layer norm applies to layer 1's output
        hidden = twin(x, output_hidden_states=True).hidden_states[1]
        expected = twin.encoder.layer_norm(hidden)
        assert torch.allclose(model.stage("frontend")(x), expected, atol=1e-5)


@pytest.mark.parametrize("how", ["dict", "omegaconf", "args"])
def test_format_auto_recognises_a_fairseq_file(tmp_path, how):
    """With plain data or with the pickled omegaconf / argparse configurations real files hold
    (which the generic reader refuses): format: auto still finds fairseq_wav2vec2."""
    model_cfg = {**BASE, **SIZE}
    twin = hf_twin(model_cfg)
    file = write_checkpoint(tmp_path / "w2v.pt", model_cfg, to_fairseq(twin.state_dict(), False), how)
    model = build(ssl_section(model_cfg, path=str(file), part="frontend")).eval()
    assert model.init_records[0]["format"] == "fairseq_wav2vec2"
    x = torch.randn(2, 4000)
    with torch.no_grad():
        assert torch.allclose(model.stage("frontend")(x), twin(x).last_hidden_state, atol=1e-5)
