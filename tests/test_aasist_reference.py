"""The authors' released AASIST / AASIST-L (clovaai/aasist, commit a04c986) through modforge:
their weight files load strictly through ``official_aasist_state_dict`` and give the logits
their own code gives (``aasist_reference_outputs.json``); the key map reports every key it
cannot place."""

from __future__ import annotations

import functools
import json
import math
import re
from pathlib import Path

import pytest
import torch

import modforge as mf
from modforge.components.backbones.aasist import official_aasist_state_dict

WEIGHTS = Path(__file__).resolve().parents[2] / "shared" / "weights"  # ../shared/weights beside the project
SAMPLES = 64_600
MODELS = [("aasist", "AASIST", 297_866), ("aasist_l", "AASIST-L", 85_306)]
needs_weights = pytest.mark.skipif(
    not WEIGHTS.is_dir(),
    reason=f"the authors' AASIST weights are not there: {WEIGHTS} (../shared/weights beside the project) is absent",
)


def build(name: str) -> torch.nn.Module:
    return mf.build_model({"backbone": name, "head": "linear"}, in_dim=1, num_classes=2, layout="waveform",
                          input_shape=[SAMPLES])


def authors_inputs() -> dict[str, torch.Tensor]:
    """The two inputs, rebuilt as aasist_reference_outputs.json describes them."""
    t = torch.arange(SAMPLES) / 16000
    noise = torch.randn(SAMPLES, generator=torch.Generator().manual_seed(1))
    tone = 0.3 * torch.sin(2 * math.pi * 150 * t) * (1 + 0.5 * torch.sin(2 * math.pi * 3 * t)) + 0.05 * noise
    return {"randn": torch.randn(2, SAMPLES, generator=torch.Generator().manual_seed(0)), "tone": tone[None]}


@needs_weights
@pytest.mark.parametrize(("name", "label", "count"), MODELS)
def test_released_weights_give_the_authors_logits(name, label, count):
    recorded = json.loads((WEIGHTS / "aasist_reference_outputs.json").read_text())["models"][label]
    state = torch.load(WEIGHTS / recorded["file"], map_location="cpu", weights_only=True)
    model = build(name)
    assert sum(p.numel() for p in model.parameters()) == count == recorded["params"]
    model.load_state_dict(official_aasist_state_dict(state), strict=True)
    model.eval()
    inputs = authors_inputs()
    assert set(inputs) == set(recorded["logits"])
    with torch.no_grad():
        for input_name, x in inputs.items():
            expected = torch.tensor(recorded["logits"][input_name])
            torch.testing.assert_close(model(x), expected, atol=1e-4, rtol=0, msg=lambda m, n=input_name: f"{n}: {m}")


@needs_weights
def test_the_released_files_map_one_to_one():
    for _, label, _ in MODELS:
        state = torch.load(WEIGHTS / f"{label}.pth", map_location="cpu", weights_only=True)
        mapped = official_aasist_state_dict(state)
        assert len(mapped) == len(state) == 229
        assert all(mapped[k] is v for k, v in zip(mapped, state.values(), strict=True))  # renamed, not copied


# --- the key map without the files: the authors' names written out independently ---------

_TO_AUTHORS = [  # modforge key pattern → the authors' name
    (r"parts\.head\.fc\.", "out_layer."),
    (r"parts\.backbone\.front\.first_bn\.", "first_bn."),
    (r"parts\.backbone\.encoder\.(\d)\.", r"encoder.\1.0."),
    (r"parts\.backbone\.gat_s\.", "GAT_layer_S."),
    (r"parts\.backbone\.gat_t\.", "GAT_layer_T."),
    (r"parts\.backbone\.branch(\d)\.hs_gal(\d)\.", r"HtrgGAT_layer_ST\1\2."),
    (r"parts\.backbone\.pool_s\.", "pool_S."),
    (r"parts\.backbone\.pool_t\.", "pool_T."),
    (r"parts\.backbone\.branch(\d)\.pool_s\.", r"pool_hS\1."),
    (r"parts\.backbone\.branch(\d)\.pool_t\.", r"pool_hT\1."),
    (r"parts\.backbone\.(pos_S|master1|master2)$", r"\1"),
]


@functools.cache
def reference_model(name: str) -> torch.nn.Module:
    """``build(name)``, once per name for the key-map tests below: they read its keys and tensors and load
    its own state back, never changing it (a build runs the model once on 64,600 samples: ~0.8 s)."""
    return build(name)


def authors_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {}
    for key, value in model.state_dict().items():
        for pattern, name in _TO_AUTHORS:
            renamed, hits = re.subn("^" + pattern, name, key)
            if hits:
                out[renamed] = value
                break
        else:
            raise AssertionError(f"no authors' name for {key}")
    return out


@pytest.mark.parametrize(("name", "label", "count"), MODELS)
def test_key_map_names_every_tensor_of_the_modforge_model(name, label, count):
    model = reference_model(name)
    reference = authors_state(model)
    assert len(reference) == 229
    mapped = official_aasist_state_dict(reference)
    assert list(mapped) == list(model.state_dict())
    model.load_state_dict(mapped, strict=True)


def test_key_map_reports_every_unplaced_and_every_missing_key():
    state = authors_state(reference_model("aasist_l"))
    state["extra.weight"] = torch.zeros(1)
    state["encoder.6.0.conv1.weight"] = torch.zeros(1)
    del state["encoder.3.0.bn1.running_var"], state["out_layer.bias"]
    with pytest.raises(ValueError) as caught:
        official_aasist_state_dict(state)
    message = str(caught.value)
    for key in ("extra.weight", "encoder.6.0.conv1.weight", "encoder.3.0.bn1.running_var", "out_layer.bias"):
        assert key in message
    assert "2 key(s) with no place" in message and "2 tensor(s) of the reference model missing" in message


def test_key_map_needs_conv_downsample_exactly_where_the_channels_change():
    state = authors_state(reference_model("aasist"))
    del state["encoder.2.0.conv_downsample.weight"]  # block 3 goes 32 → 64 channels: required
    with pytest.raises(ValueError, match=r"missing: encoder\.2\.0\.conv_downsample\.weight"):
        official_aasist_state_dict(state)
    state = authors_state(reference_model("aasist"))
    state["encoder.1.0.conv_downsample.weight"] = torch.zeros(32, 32, 1, 3)  # 32 → 32: no such conv
    with pytest.raises(ValueError, match=r"no place in modforge's AASIST: encoder\.1\.0\.conv_downsample\.weight"):
        official_aasist_state_dict(state)


def test_key_map_refuses_other_files_with_a_reason():
    state = authors_state(reference_model("aasist_l"))
    with pytest.raises(ValueError, match="DataParallel"):
        official_aasist_state_dict({f"module.{k}": v for k, v in state.items()})
    with pytest.raises(ValueError, match="not tensors: epoch"):
        official_aasist_state_dict({**state, "epoch": 3})
    with pytest.raises(ValueError, match="a mapping"):
        official_aasist_state_dict([("pos_S", torch.zeros(1))])
