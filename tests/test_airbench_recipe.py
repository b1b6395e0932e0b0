"""The airbench94 recipe's parts (configs/vision/cifar10_airbench94.yaml): whitening, lookahead,
parameter freezing, the triangular schedule, test-time augmentation, exact resume — and, when
airbench itself is importable, its first losses against airbench's own code."""

from __future__ import annotations

import copy
import importlib.util
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import modforge as mf
from modforge.core.config import load_config
from modforge.core.errors import ConfigError
from modforge.data.base import ArrayDataset, DataSplits
from modforge.experiment.runner import Experiment
from modforge.experiment.schema import validate_config
from modforge.model.whitening import image_patches, patch_whitening_weight, whiten_conv_
from modforge.train.callbacks.base import Callback
from modforge.train.callbacks.freeze import FreezeParameters
from modforge.train.callbacks.lookahead import Lookahead
from modforge.train.callbacks.whitening_init import WhiteningInit
from modforge.train.triangular import Triangular

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "vision" / "cifar10_airbench94.yaml"


def correlated_pictures(n: int, seed: int = 0) -> torch.Tensor:
    """Pictures whose neighbouring pixels and channels are correlated (as real ones are)."""
    g = torch.Generator().manual_seed(seed)
    noise = torch.randn(n, 3, 34, 34, generator=g)
    smooth = F.avg_pool2d(noise, 3, stride=1)  # neighbours share most of their sum
    mix = torch.tensor([[1.0, 0.6, 0.3], [0.5, 1.0, 0.5], [0.2, 0.7, 1.0]])
    return torch.einsum("dc,nchw->ndhw", mix, smooth) + 0.3 * torch.randn(n, 3, 32, 32, generator=g)


def tiny_recipe(**train_changes) -> Experiment:
    """The shipped config on 48 correlated pictures: narrow widths, batches of 16 (3 steps an
    epoch), 3 epochs, lookahead every 2 steps, the whitening bias frozen from epoch 1."""
    cfg = load_config(CONFIG)
    data, train = cfg.data["data"], cfg.data["train"]
    data.update(batch_size=16, num_workers=0, persistent_workers=False, pin_memory=False)
    cfg.data["model"]["backbone"]["args"]["widths"] = [8, 16, 16]
    train.update(max_epochs=3, max_steps=9, precision="32", device="cpu", engine="eager", **train_changes)
    for spec in train["callbacks"]:
        spec["args"].update({"whitening_init": {"samples": 32}, "freeze_parameters": {"from_epoch": 1},
                             "lookahead": {"every": 2}}[spec["type"]])  # fmt: skip
    validate_config(cfg)
    g = torch.Generator().manual_seed(1)
    labels = torch.randint(0, 10, (48,), generator=g)
    inputs = correlated_pictures(48) + 0.5 * labels.view(-1, 1, 1, 1) / 10  # learnable: brightness says the class
    split = ArrayDataset(inputs, labels)
    splits = DataSplits(train=split, val=None, test=None, num_classes=10, in_dim=3, layout="image",
                        input_shape=(3, 32, 32))  # fmt: skip
    return Experiment.build(cfg, splits)


class Snapshot(Callback):
    """Keeps the whitening weights after fit start and a full checkpoint payload after step ``at``."""

    order = 90

    def __init__(self, at: int):
        self.at, self.payload, self.whiten = at, None, None

    def on_fit_start(self, trainer) -> None:
        self.whiten = trainer.model.parts.backbone.whiten.weight.detach().clone()

    def on_step_end(self, trainer) -> None:
        if trainer.global_step == self.at:
            self.payload = copy.deepcopy(trainer.checkpoint_payload())


def test_whitening_filters_give_the_patches_an_identity_second_moment():
    pictures = correlated_pictures(16)
    conv = mf.BACKBONES.get("airbench")(3).whiten
    whiten_conv_(conv, pictures, eps=0.0)
    half = conv.weight[:12]
    assert torch.equal(conv.weight[12:], -half)  # each filter also negated (GELU keeps both signs)
    out = F.conv2d(pictures, half).permute(0, 2, 3, 1).reshape(-1, 12)
    moments = out.T @ out / len(out)
    assert (moments - torch.eye(12)).abs().max() < 1e-3
    flat = image_patches(pictures, (2, 2)).reshape(-1, 12)
    raw = flat.T @ flat / len(flat)
    assert (raw - torch.diag(raw.diagonal())).abs().max() > 0.1  # the input patches were far from white
    with pytest.raises(ValueError, match="output channels"):
        whiten_conv_(torch.nn.Conv2d(3, 5, 2), pictures)
    assert patch_whitening_weight(pictures, (2, 2), negated=False).shape == (12, 3, 2, 2)


def test_the_recipe_trains_and_a_run_resumed_mid_epoch_ends_bitwise_equal():
    exp = tiny_recipe()
    built = exp.model.parts.backbone.whiten.weight.detach().clone()
    loader = exp.loaders()[0]
    trainer = exp.trainer(loader, None)
    snap = Snapshot(at=4)  # the second step of the second epoch
    trainer.add_callback(snap)
    history = trainer.fit(loader)
    model = exp.model
    # whitening_init set the frozen first layer from the first 32 training pictures, before step 1
    assert not torch.equal(snap.whiten, built)
    first = torch.cat([b["input"] for b in exp.loaders()[0]])[:32]
    out = F.conv2d(first, snap.whiten[:12]).permute(0, 2, 3, 1).reshape(-1, 12)
    assert ((out.T @ out / len(out)) - torch.eye(12)).abs().max() < 0.1
    # freeze_parameters: the whitening bias stopped training after epoch 0; its weights never train
    assert not model.parts.backbone.whiten.bias.requires_grad and not model.parts.backbone.whiten.weight.requires_grad
    assert trainer.global_step == 9 and history[-1]["train_loss"] < history[0]["train_loss"]
    # lookahead: after the last step the weights are the slow copy
    slow = next(cb for cb in trainer.callbacks if isinstance(cb, Lookahead)).slow
    assert all(torch.equal(slow[k], v) for k, v in model.state_dict().items() if v.is_floating_point())

    again = tiny_recipe()
    loader2 = again.loaders()[0]
    resumed = again.trainer(loader2, None)
    resumed.fit(loader2, resume=snap.payload)
    theirs = again.model.state_dict()
    assert all(torch.equal(v, theirs[k]) for k, v in model.state_dict().items())
    slow2 = next(cb for cb in resumed.callbacks if isinstance(cb, Lookahead)).slow
    assert all(torch.equal(slow[k], slow2[k]) for k in slow)


def test_tta_averages_the_logits_of_flipped_and_shifted_pictures():
    section = load_config(CONFIG).data["model"]
    section["backbone"]["args"].update(widths=[8, 16, 16], tta="none")
    plain = mf.build_model(copy.deepcopy(section), in_dim=3, num_classes=10).eval()
    models = {}
    for mode in ("flip", "flip_translate"):
        section["backbone"]["args"]["tta"] = mode
        models[mode] = mf.build_model(copy.deepcopy(section), in_dim=3, num_classes=10).eval()
        models[mode].load_state_dict(plain.state_dict())
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        mirror = 0.5 * plain(x) + 0.5 * plain(x.flip(-1))
        assert torch.allclose(models["flip"](x), mirror, atol=1e-6)
        padded = F.pad(x, (1, 1, 1, 1), mode="reflect")
        shifts = [padded[..., :32, :32], padded[..., 2:, 2:]]
        shifted = sum(0.5 * plain(s) + 0.5 * plain(s.flip(-1)) for s in shifts) / 2
        assert torch.allclose(models["flip_translate"](x), 0.5 * mirror + 0.5 * shifted, atol=1e-6)
        assert not torch.allclose(models["flip"](x), plain(x), atol=1e-4)  # the views do differ
    models["flip"].train()
    plain.train()
    with torch.no_grad():  # training sees the plain picture only
        assert torch.allclose(models["flip"](x), plain(x), atol=1e-6)


def test_triangular_rate_and_lookahead_pull_follow_airbench():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    sched = Triangular(opt, total_steps=100, start_factor=0.2, peak=0.23, end_factor=0.07)
    assert sched.factor(0) == pytest.approx(0.2) and sched.factor(23) == pytest.approx(1.0)
    assert sched.factor(100) == pytest.approx(0.07) and sched.factor(150) == pytest.approx(0.07)
    assert sched.factor(11) == pytest.approx(0.2 + 0.8 * 11 / 23)
    assert sched.factor(60) == pytest.approx(1 - 0.93 * 37 / 77)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.4)
    look = Lookahead(every=5)
    look._planned = 476
    assert look.decay(476) == pytest.approx(0.95**5) and look.decay(238) == pytest.approx(0.95**5 / 8)


def test_a_wrong_module_or_parameter_name_is_one_error_naming_what_the_model_has():
    model = mf.build_model({"backbone": {"type": "airbench", "args": {"widths": [8, 16, 16]}}, "head": "linear"},
                           in_dim=3, num_classes=10)  # fmt: skip
    trainer = SimpleNamespace(model=model, train_loader=[{"input": torch.randn(2, 3, 32, 32)}])
    with pytest.raises(ConfigError, match=r"no module 'parts\.backbone\.nope'.*parts\.backbone\.whiten"):
        WhiteningInit(module="parts.backbone.nope").on_fit_start(trainer)
    with pytest.raises(ConfigError, match="output channels"):
        WhiteningInit(module="parts.backbone.groups.0.conv1").on_fit_start(trainer)
    with pytest.raises(ConfigError, match=r"no parameter matches \['parts\.nope\.\*'\].*parts\.backbone\.whiten"):
        FreezeParameters(names=["parts.nope.*"], from_epoch=1).on_epoch_start(SimpleNamespace(model=model, epoch=0))


def test_first_losses_equal_airbenchs_own_code():
    pytest.importorskip("airbench", reason="airbench (PyPI 0.1.8) is not installed: the parity runs where it is")
    pytest.importorskip("torchvision")
    spec = importlib.util.spec_from_file_location("airbench_benchmark", ROOT / "benchmarks" / "airbench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.parity(steps=10, batch=32, pictures=160, floor=False)
    assert len(result["modforge"]) == len(result["airbench"]) == 10
    assert result["max_abs_diff"] <= 1e-3 and all(math.isfinite(v) for v in result["modforge"])


def test_the_global_max_pool_sends_each_channels_gradient_to_one_position_as_airbenchs_max_pool():
    # airbench's MaxPool2d(3) remembers where each maximum was; an amax compares the map with the
    # maximum again in backward, which under torch.compile in 16 bits (Inductor's float32 map against
    # the stored 16-bit maximum) found no position: 0/0 (the compile engine now also rounds as eager)
    network = mf.BACKBONES.build({"type": "airbench", "args": {"widths": [8, 16, 16]}}, path="backbone", in_dim=3)
    maps = torch.zeros(2, 16, 3, 3, requires_grad=True)  # every position a maximum
    network._pooled(maps).sum().backward()
    assert (maps.grad.flatten(2) != 0).sum(-1).eq(1).all()  # one position per channel and picture
    ours, theirs = torch.randn(2, 16, 3, 3, requires_grad=True), torch.nn.MaxPool2d(3)  # airbench's, on a 3x3 map
    network._pooled(ours).sum().backward()
    same = ours.detach().clone().requires_grad_()
    (theirs(same).flatten(1) * network.scale).sum().backward()
    assert torch.equal(ours.grad, same.grad)
