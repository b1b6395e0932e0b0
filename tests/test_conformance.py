"""The conformance suite over every registered part, and proof that each check can fail."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import modforge as mf
from modforge.components import Backbone, Layout
from modforge.testing import PART_KINDS, check_part
from part_checks import CORE_CHECKS, assert_contract

ALL_PARTS = [(kind, name) for kind in PART_KINDS for name in mf.REGISTRIES[kind].list()]
SCRIPTED = {  # compiled by TorchScript (not traced) under every declared layout
    "backbone": {"aasist", "aasist_l", "rawnet2", "lcnn", "ecapa_tdnn", "tcm_conformer", "nes2net"},
    "frontend": {"raw", "spectrogram", "log_mel", "lfcc", "mfcc", "sinc"},
}


@pytest.mark.parametrize(("kind", "name"), ALL_PARTS, ids=[f"{k}-{n}" for k, n in ALL_PARTS])
def test_every_registered_part_passes_the_contract(kind, name):
    results = check_part(kind, name)
    assert_contract(results, CORE_CHECKS, layouts=True)
    if name in SCRIPTED.get(kind, ()):
        engines = [r.detail for r in results if r.check == "engines"]
        assert engines and all("torchscript ≤" in d and "onnx ≤" in d for d in engines), engines


def test_zoo_has_the_promised_parts():
    assert {"mlp", "cnn", "resnet18", "resnet34", "preact_resnet18", "vit_tiny", "attention_pool_mlp"} <= set(
        mf.BACKBONES
    )
    assert {"identity", "global_avg_pool", "attentive_stats_pool", "fpn"} <= set(mf.NECKS)
    assert {"linear", "cosine", "mlp"} <= set(mf.HEADS)
    assert {"cross_entropy", "focal", "bce_with_logits"} <= set(mf.LOSSES)


class Base(Backbone):
    accepts = (Layout.VECTOR,)
    produces = Layout.VECTOR

    def __init__(self, in_dim: int):
        super().__init__()
        self.fc = nn.Linear(in_dim, 4)
        self.out_dim = 4

    def forward(self, x):
        return self.fc(x)


class WrongOutDim(Base):
    def __init__(self, in_dim: int):
        super().__init__(in_dim)
        self.out_dim = 7


class MakesNaN(Base):
    def forward(self, x):
        return self.fc(x) * float("nan")


class UnusedParameter(Base):
    def __init__(self, in_dim: int):
        super().__init__(in_dim)
        self.spare = nn.Linear(4, 4)


class Detaches(Base):
    def forward(self, x):
        return self.fc(x.detach()).detach()


class Random(Base):
    def forward(self, x):
        return self.fc(x) + torch.rand_like(x[:, :4])


class BatchDependent(Base):
    def forward(self, x):
        out = self.fc(x)
        return out - out.mean(dim=0, keepdim=True)


class FixedDevice(Base):
    def forward(self, x):
        return self.fc(x) + torch.ones(x.shape[0], 4)


class ForgetsState(Base):
    def __init__(self, in_dim: int):
        super().__init__(in_dim)
        self.scale = torch.randn(4)  # a plain attribute: not in the state_dict

    def forward(self, x):
        return self.fc(x) * self.scale


class BadFlatParams(Base):
    def set_params(self, vector):
        pass  # ignores its argument


class ReturntDisagrees(Base):
    def forward(self, x, returnt: str = "out"):
        out = self.fc(x)
        if returnt == "features":
            return x
        if returnt == "both":
            return out, x + 1
        return out


@pytest.mark.parametrize(
    ("part", "check", "message"),
    [
        (WrongOutDim, "out_dim", "declares out_dim 7"),
        (MakesNaN, "finite", "NaN/Inf"),
        (UnusedParameter, "gradients", "no gradient reaches spare.weight"),
        (Detaches, "gradients", "no gradient"),
        (Random, "deterministic", "two eval forwards differ"),
        (BatchDependent, "batch_independence", "row 0 differs"),
        (FixedDevice, "device", "fixed device"),
        (ForgetsState, "state_dict", "differs"),
        (ForgetsState, "device", "fixed device"),  # a plain tensor attribute does not follow .to()
        (BadFlatParams, "flat_params", "set_params() then get_params()"),
        (ReturntDisagrees, "returnt", 'returnt="both" differs'),
    ],
)
def test_each_check_catches_its_violation(part, check, message):
    results = {r.check: r for r in check_part("backbone", part)}
    assert results[check].status == "fail", results[check]
    assert message in results[check].detail


def test_a_well_behaved_part_passes_every_check():
    assert [r.check for r in check_part("backbone", Base) if r.status == "fail"] == []


def test_a_part_that_does_not_build_is_reported():
    def broken(in_dim: int):
        raise RuntimeError("nope")

    results = check_part("backbone", broken)
    assert results[0].check == "builds" and results[0].status == "fail" and "nope" in results[0].detail
    assert all(r.status == "skip" for r in results[1:])


BROKEN_PLUGIN = """
import torch.nn as nn
from modforge.components import Backbone, Layout

class Liar(Backbone):
    accepts = (Layout.VECTOR,)
    def __init__(self, in_dim: int, width: int = 3):
        super().__init__()
        self.fc = nn.Linear(in_dim, width)
        self.out_dim = width + 1
    def forward(self, x):
        return self.fc(x)
"""


def test_check_command_exit_statuses(cli, write):
    res = cli("check", "backbone", "mlp", "--args", "hidden_dims=[8]")
    assert res.code == 0, res.err
    assert "builds" in res.out and "0 failed" in res.out
    write("liar.py", BROKEN_PLUGIN)
    res = cli("check", "backbone", "liar.py:Liar", "--args", "width=2")
    assert res.code == 1
    assert "declares out_dim 3" in res.out and "1 failed" in res.out
    res = cli("check", "backbone", "mlpp")
    assert res.code == 2 and "did you mean 'mlp'" in res.err
    res = cli("check", "backbone", "mlp", "--args", "hidden_dims")
    assert res.code == 2 and "must look like key=value" in res.err
    res = cli("check", "backbone", "mlp", "--args", "hiden_dims=[3]")
    assert res.code == 1 and "unknown argument 'hiden_dims'" in res.out


def test_check_layout_option_and_plain_module_probing(cli, write):
    write(
        "plain.py",
        "import torch.nn as nn\nclass Conv(nn.Module):\n    def __init__(self, in_dim: int):\n"
        "        super().__init__()\n        self.c = nn.Conv2d(in_dim, 4, 3)\n    def forward(self, x):\n        return self.c(x)\n",
    )
    res = cli("check", "backbone", "plain.py:Conv")
    assert res.code == 0 and "image (probed)" in res.out
    res = cli("check", "neck", "global_avg_pool", "--layout", "sequence")
    assert res.code == 0 and "sequence" in res.out and "image" not in res.out
