"""The audio zoo together: every backbone with every frontend whose layout it takes (through
the builder's adapters), every backbone from 1 s to 10 s, losses combined in any order, and
every shipped spoofing config building."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

import modforge as mf
from modforge.components.layouts import Layout
from modforge.model.builder import fit_layout
from modforge.model.introspect import accepted_layouts

ROOT = Path(__file__).resolve().parents[1]
SR = 16_000
FRONTENDS = ("raw", "spectrogram", "log_mel", "lfcc", "mfcc", "sinc", "ssl")
BACKBONES = ("aasist", "aasist_l", "rawnet2", "lcnn", "ecapa_tdnn", "tcm_conformer", "nes2net", "resnet18", "mlp")
SMALL = {  # narrower settings where the defaults would make this sweep slow; the structure is the same
    "rawnet2": {"gru_dim": 64, "fc_dim": 64},
    "ecapa_tdnn": {"channels": 128, "mfa_dim": 384},
    "resnet18": {"width": 0.125},
}
SMALL_FRONTEND = {  # the sinc filters' 5,000 frames a second would make the attention backbones quadratic in them
    "sinc": {"stride": 4},
}
FRONTEND_OUT = {"raw": Layout.WAVEFORM, "sinc": Layout.CHANNELS}  # the rest produce sequences


def _model(frontend: str, backbone: str, seconds: float = 1.0) -> torch.nn.Module:
    return mf.build_model(
        {"frontend": {"type": frontend, "args": SMALL_FRONTEND.get(frontend, {})},
         "backbone": {"type": backbone, "args": SMALL.get(backbone, {})}, "head": "linear"},
        in_dim=1,
        num_classes=2,
        layout="waveform",
        input_shape=(int(seconds * SR),),
        sample_rate=SR,
    )


def _compatible(frontend: str, backbone: str) -> bool:
    """The builder connects them. Raw samples into a frame-feature backbone (the waveform →
    channels adapter: 16,000 one-value frames a second) connect too, but are no system anyone
    trains — and quadratic in time for attention backbones — so the sweep leaves them out."""
    produced = FRONTEND_OUT.get(frontend, Layout.SEQUENCE)
    accepts = accepted_layouts(mf.BACKBONES.get(backbone), "backbone")
    if produced is Layout.WAVEFORM and Layout.WAVEFORM not in accepts:
        return False
    return fit_layout(produced, accepts, 1) is not None


PAIRS = [(f, b) for f in FRONTENDS for b in BACKBONES if _compatible(f, b)]


def test_the_sweep_covers_the_audio_zoo():
    assert {b for _, b in PAIRS} == set(BACKBONES) and {f for f, _ in PAIRS} == set(FRONTENDS)
    assert ("raw", "aasist") in PAIRS and ("lfcc", "lcnn") in PAIRS and ("ssl", "tcm_conformer") in PAIRS


@pytest.mark.slow
@pytest.mark.parametrize(("frontend", "backbone"), PAIRS, ids=[f"{f}-{b}" for f, b in PAIRS])
def test_backbone_works_with_every_frontend_it_accepts(frontend, backbone):
    model = _model(frontend, backbone).eval()
    with torch.no_grad():
        out = model({"input": torch.randn(2, SR) * 0.1})
    assert out["logits"].shape == (2, 2) and torch.isfinite(out["logits"]).all()


NATURAL = {  # each backbone with the frontend it is usually paired with
    "aasist": "raw", "aasist_l": "raw", "rawnet2": "raw", "lcnn": "lfcc", "ecapa_tdnn": "log_mel",
    "tcm_conformer": "ssl", "nes2net": "ssl", "resnet18": "log_mel", "mlp": "lfcc",
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("backbone", BACKBONES)
def test_every_backbone_from_one_to_ten_seconds(backbone):
    model = _model(NATURAL[backbone], backbone, seconds=4.0).eval()  # built for 4 s, run at 1 s and 10 s too
    with torch.no_grad():
        for seconds in (1, 4, 10):
            logits = model(torch.randn(1, seconds * SR) * 0.1)
            assert logits.shape == (1, 2) and torch.isfinite(logits).all(), seconds


@pytest.mark.parametrize(
    ("losses", "scorer"),
    [
        (["cross_entropy", {"type": "oc_softmax", "weight": 0.5}], "loss_cross_entropy"),
        ([{"type": "oc_softmax", "weight": 0.5}, "cross_entropy"], "loss_oc_softmax"),
        (["am_softmax", "a_softmax", "cross_entropy"], "loss_am_softmax"),
    ],
)
def test_losses_combine_in_any_order_and_the_first_scorer_scores(losses, scorer):
    model = mf.build_model(
        {"frontend": "lfcc", "backbone": {"type": "mlp", "args": {"hidden_dims": [16]}}, "head": "linear",
         "losses": losses},
        in_dim=1, num_classes=2, layout="waveform", input_shape=(SR // 2,), sample_rate=SR, scores=True,
    )
    batch = {"input": torch.randn(4, SR // 2) * 0.1, "label": torch.tensor([0, 1, 0, 1])}
    out = model(batch)
    keys = [info.key for info in model.loss_info]
    weights = {info.key: info.weight for info in model.loss_info}
    assert torch.allclose(out["loss"], sum(out[k] * weights[k] for k in keys))
    fn = model.loss_fns[scorer]
    expected = fn.score(out[next(i.input_key for i in model.loss_info if i.key == scorer)])
    assert model.scorer[0] == scorer and torch.allclose(out["score"], expected)
    out["loss"].backward()
    assert all(p.grad is not None for p in model.loss_fns.parameters())


CONFIGS = sorted(p for p in (ROOT / "configs" / "spoofing").glob("*.yaml") if p.name != "base.yaml")


def test_the_promised_configs_exist():
    assert {p.stem for p in CONFIGS} >= {
        "lfcc_mlp", "lfcc_lcnn", "log_mel_resnet18", "raw_rawnet2", "raw_aasist", "ssl_tiny_aasist"
    }


@pytest.mark.slow
@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_every_spoofing_config_validates_and_builds(path):
    from modforge.experiment.schema import validate_config

    overrides = []
    init = ((yaml.safe_load(path.read_text()) or {}).get("model") or {}).get("init")
    if isinstance(init, dict) and not (path.parent / init["path"]).is_file():  # published weights the user fetches
        shared = ROOT.parent / "shared" / "weights" / Path(init["path"]).name
        overrides.append(f"model.init.path={shared}" if shared.is_file() else "model.init=null")
    if path.stem == "aasist_official":  # evaluates the authors' weights on a folder the user names
        overrides.append("data.args.root=.")
    cfg = validate_config(mf.load_config(path, overrides))
    assert cfg.data["task"] == "spoofing"
    model = mf.build_model(cfg, in_dim=1, num_classes=2, layout="waveform", input_shape=(SR,), sample_rate=SR,
                           scores=True)
    with torch.no_grad():
        out = model.eval()({"input": torch.randn(2, SR) * 0.1})
    assert out["score"].shape == (2,)
