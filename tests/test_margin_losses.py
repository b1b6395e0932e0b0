"""Margin losses (am_softmax, oc_softmax, a_softmax): hand-computed values, gradients,
scores, the contract checks and clear errors."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import modforge as mf
from modforge.components.losses.margin import AMSoftmax, ASoftmax, OCSoftmax
from modforge.testing import check_part
from part_checks import CORE_CHECKS, assert_contract

torch.set_num_threads(1)

NAMES = ("am_softmax", "oc_softmax", "a_softmax")


def _eye_weights(loss: torch.nn.Module) -> None:
    """Class 0 along x, class 1 along y (2-d embeddings, 2 classes)."""
    with torch.no_grad():
        loss.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))


@pytest.mark.parametrize("name", NAMES)
def test_every_contract_check_passes(name):
    assert_contract(check_part("loss", name), CORE_CHECKS | {"device"})


@pytest.mark.parametrize("name", NAMES)
def test_registered_reading_the_embedding(name):
    assert name in mf.LOSSES
    assert mf.LOSSES.get(name).input_key == "embedding"


def test_am_softmax_by_hand():
    loss = AMSoftmax(in_dim=2, num_classes=2, scale=10.0, margin=0.2)
    _eye_weights(loss)
    # x1 = (3, 4): cosines (0.6, 0.8), label 0 -> logits (10 (0.6 - 0.2), 10 * 0.8) = (4, 8)
    #   loss = -log(e^4 / (e^4 + e^8)) = log(1 + e^4)
    # x2 = (2, 0): cosines (1, 0), label 1 -> logits (10, 10 (0 - 0.2)) = (10, -2)
    #   loss = log(1 + e^12)
    x = torch.tensor([[3.0, 4.0], [2.0, 0.0]])
    y = torch.tensor([0, 1])
    expected = (math.log1p(math.exp(4)) + math.log1p(math.exp(12))) / 2
    assert loss(x, y).item() == pytest.approx(expected, rel=1e-6)
    assert torch.allclose(loss.logits(x), torch.tensor([[0.6, 0.8], [1.0, 0.0]]))
    assert torch.allclose(loss.score(x), torch.tensor([0.8, 0.0]))


def test_am_softmax_without_margin_is_scaled_cosine_cross_entropy():
    torch.manual_seed(0)
    loss = AMSoftmax(in_dim=8, num_classes=5, scale=16.0, margin=0.0)
    x, y = torch.randn(6, 8), torch.randint(0, 5, (6,))
    cos = F.normalize(x, dim=1) @ F.normalize(loss.weight, dim=1).T
    assert torch.allclose(loss(x, y), F.cross_entropy(16.0 * cos, y), atol=1e-6)
    assert torch.allclose(loss.logits(x), cos, atol=1e-6)


def test_oc_softmax_by_hand():
    loss = OCSoftmax(in_dim=2, num_classes=5)
    with torch.no_grad():
        loss.center.copy_(torch.tensor([[2.0, 0.0]]))  # only its direction matters
    # bona fide (label 1) at cos 0.6:   softplus(20 (0.9 - 0.6)) = log(1 + e^6)
    # spoof (label 0) at cos 0:          softplus(20 (0 - 0.2))   = log(1 + e^-4)
    # spoof (label 3: any non-bona-fide label) at cos -1: softplus(20 (-1 - 0.2)) = log(1 + e^-24)
    x = torch.tensor([[3.0, 4.0], [0.0, 2.0], [-1.0, 0.0]])
    y = torch.tensor([1, 0, 3])
    expected = (math.log1p(math.exp(6)) + math.log1p(math.exp(-4)) + math.log1p(math.exp(-24))) / 3
    assert loss(x, y).item() == pytest.approx(expected, rel=1e-6)
    assert torch.allclose(loss.score(x), torch.tensor([0.6, 0.0, -1.0]))
    # logits: [m_real + m_fake - s, s]; bona fide wins above the margins' midpoint 0.55
    logits = loss.logits(x)
    assert logits.shape == (3, 2)
    assert torch.allclose(logits[:, 1], loss.score(x))
    assert torch.allclose(logits[:, 0], 1.1 - loss.score(x))
    assert logits.argmax(dim=1).tolist() == [1, 0, 0]


def test_oc_softmax_bonafide_label_is_configurable():
    loss = OCSoftmax(in_dim=2, bonafide_label=0)
    with torch.no_grad():
        loss.center.copy_(torch.tensor([[1.0, 0.0]]))
    x = torch.tensor([[1.0, 0.0]])
    assert loss(x, torch.tensor([0])).item() == pytest.approx(math.log1p(math.exp(20 * (0.9 - 1.0))), rel=1e-6)
    assert loss(x, torch.tensor([1])).item() == pytest.approx(math.log1p(math.exp(20 * (1.0 - 0.2))), rel=1e-6)


def test_a_softmax_by_hand_with_a_fixed_lambda():
    loss = ASoftmax(in_dim=2, num_classes=2, margin=4, lambda_base=1.0, lambda_min=1.0)
    _eye_weights(loss)
    # x1 = (√3, 1): |x| = 2, θ0 = 30°, θ1 = 60°; label 0.
    #   k = floor(4·30°/180°) = 0, ψ = cos(120°) = -0.5
    #   target = 2 (λ cos30° + ψ) / (1 + λ) = (√3/2 - 0.5); other = 2 cos60° = 1
    # x2 = (1, √3): |x| = 2, θ0 = 60°, θ1 = 30°; label 0.
    #   k = floor(4·60°/180°) = 1, ψ = (-1)^1 cos(240°) - 2 = 0.5 - 2 = -1.5
    #   target = 2 (0.5 - 1.5) / 2 = -1; other = 2 cos30° = √3
    r3 = math.sqrt(3.0)
    x = torch.tensor([[r3, 1.0], [1.0, r3]])
    y = torch.tensor([0, 0])
    t1, o1 = r3 / 2 - 0.5, 1.0
    t2, o2 = -1.0, r3
    expected = (math.log1p(math.exp(o1 - t1)) + math.log1p(math.exp(o2 - t2))) / 2
    assert loss(x, y).item() == pytest.approx(expected, rel=1e-6)
    assert torch.allclose(loss.logits(x), torch.tensor([[r3 / 2, 0.5], [0.5, r3 / 2]]))
    assert torch.allclose(loss.score(x), torch.tensor([0.5, r3 / 2]))


def test_a_softmax_psi_is_monotone_and_continuous():
    loss = ASoftmax(in_dim=2, num_classes=2, margin=4)
    theta = torch.linspace(0, math.pi, 2001, dtype=torch.float64)
    psi = loss.psi(torch.cos(theta))
    assert (psi[1:] <= psi[:-1] + 1e-9).all()  # decreasing
    assert (psi[1:] - psi[:-1]).abs().max() < 0.02  # no jumps at kπ/m
    assert psi[0].item() == pytest.approx(1.0) and psi[-1].item() == pytest.approx(1 - 2 * 4)
    small = theta <= math.pi / 4
    assert torch.allclose(psi[small], torch.cos(4 * theta[small]))  # ψ = cos(mθ) on [0, π/m]


def test_a_softmax_lambda_anneals_in_training_only_and_is_saved():
    torch.manual_seed(0)
    loss = ASoftmax(in_dim=4, num_classes=3)
    x, y = torch.randn(5, 4), torch.randint(0, 3, (5,))
    assert loss.current_lambda().item() == pytest.approx(1000.0)
    loss.eval()
    loss(x, y)
    assert int(loss.iteration) == 0  # eval forwards leave the schedule alone
    loss.train()
    for _ in range(10):
        loss(x, y)
    assert int(loss.iteration) == 10
    assert loss.current_lambda().item() == pytest.approx(1000.0 / (1 + 0.12 * 10), rel=1e-6)
    other = ASoftmax(in_dim=4, num_classes=3)
    other.load_state_dict(loss.state_dict())
    assert int(other.iteration) == 10
    with torch.no_grad():
        loss.iteration.fill_(100_000)
    assert loss.current_lambda().item() == pytest.approx(5.0)


def test_a_softmax_with_margin_one_and_no_lambda_is_plain_normalised_softmax():
    torch.manual_seed(0)
    loss = ASoftmax(in_dim=6, num_classes=4, margin=1, lambda_base=0.0, lambda_min=0.0)
    x, y = torch.randn(7, 6), torch.randint(0, 4, (7,))
    logits = x.norm(dim=1, keepdim=True) * (F.normalize(x, dim=1) @ F.normalize(loss.weight, dim=1).T)
    assert torch.allclose(loss(x, y), F.cross_entropy(logits, y), atol=1e-5)


def test_a_softmax_is_the_only_loss_of_a_model():
    """DeepFense's A-softmax fails as the first/only loss; this one trains a model on its own."""
    torch.manual_seed(0)
    model = mf.build_model(
        {"backbone": {"type": "mlp", "args": {"hidden_dims": [8]}}, "losses": [{"type": "a_softmax"}]},
        in_dim=6,
        num_classes=2,
    )
    out = model({"input": torch.randn(4, 6), "label": torch.tensor([0, 1, 1, 0])})
    assert torch.isfinite(out["loss"])
    out["loss"].backward()
    assert out["logits"].shape == (4, 2)


@pytest.mark.parametrize("name", NAMES)
def test_gradients_reach_the_embedding_and_the_classifier(name):
    torch.manual_seed(0)
    loss = mf.LOSSES.build(name, in_dim=8, num_classes=2).train()
    x = torch.randn(6, 8, requires_grad=True)
    loss(x, torch.tensor([0, 1, 0, 1, 1, 0])).backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    classifier = loss.center if name == "oc_softmax" else loss.weight
    assert classifier.grad is not None and classifier.grad.abs().sum() > 0


@pytest.mark.parametrize("name", NAMES)
def test_an_embedding_on_the_bonafide_direction_scores_highest(name):
    torch.manual_seed(0)
    loss = mf.LOSSES.build(name, in_dim=8, num_classes=2).eval()
    bonafide = (loss.center[0] if name == "oc_softmax" else loss.weight[1]).detach()
    x = torch.cat([torch.randn(5, 8), bonafide.unsqueeze(0) * 3.0, -bonafide.unsqueeze(0)])
    with torch.no_grad():
        score = loss.score(x)
    assert score.shape == (7,)
    assert int(score.argmax()) == 5 and score[5].item() == pytest.approx(1.0, abs=1e-6)
    assert int(score.argmin()) == 6
    logits = loss.logits(x)
    assert logits.shape == (7, 2) and int(logits[5].argmax()) == 1


@pytest.mark.parametrize(
    ("cls", "kwargs", "words"),
    [
        (AMSoftmax, {"in_dim": 0, "num_classes": 2}, "in_dim"),
        (AMSoftmax, {"in_dim": 4, "num_classes": 1}, "num_classes"),
        (AMSoftmax, {"in_dim": 4, "num_classes": 2, "scale": 0.0}, "scale"),
        (AMSoftmax, {"in_dim": 4, "num_classes": 2, "margin": -0.1}, "margin"),
        (AMSoftmax, {"in_dim": 4, "num_classes": 2, "bonafide_label": 2}, "bonafide_label"),
        (OCSoftmax, {"in_dim": 4, "m_real": 0.2, "m_fake": 0.5}, "m_fake < m_real"),
        (OCSoftmax, {"in_dim": 4, "m_real": 1.5}, "m_real"),
        (OCSoftmax, {"in_dim": 4, "alpha": 0.0}, "alpha"),
        (OCSoftmax, {"in_dim": 4, "num_classes": 2, "bonafide_label": 3}, "bonafide_label"),
        (ASoftmax, {"in_dim": 4, "num_classes": 2, "margin": 0}, "margin"),
        (ASoftmax, {"in_dim": 4, "num_classes": 2, "margin": 2.5}, "margin"),
        (ASoftmax, {"in_dim": 4, "num_classes": 2, "lambda_base": 1.0, "lambda_min": 5.0}, "lambda_base"),
        (ASoftmax, {"in_dim": 4, "num_classes": 2, "lambda_gamma": -1.0}, "lambda_gamma"),
    ],
)
def test_bad_arguments_are_one_clear_error(cls, kwargs, words):
    with pytest.raises(ValueError, match=words):
        cls(**kwargs)


@pytest.mark.parametrize("name", NAMES)
def test_bad_inputs_are_one_clear_error(name):
    loss = mf.LOSSES.build(name, in_dim=8, num_classes=2)
    with pytest.raises(ValueError, match=r"embedding of shape \[batch, 8\]"):
        loss(torch.randn(4, 7), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"labels of shape \[4\]"):
        loss(torch.randn(4, 8), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="integer class indices"):
        loss(torch.randn(4, 8), torch.zeros(4))
    with pytest.raises(ValueError, match="embedding of shape"):
        loss.score(torch.randn(4, 8, 2))


def test_cross_entropy_scores_log_odds_or_the_raw_bona_fide_logit():
    import modforge as mf

    logits = torch.tensor([[2.0, -1.0], [0.5, 3.0]])
    assert torch.allclose(mf.LOSSES.build("cross_entropy").score(logits), torch.tensor([-3.0, 2.5]))
    raw = mf.LOSSES.build({"type": "cross_entropy", "args": {"score": "logit"}})
    assert torch.equal(raw.score(logits), logits[:, 1])  # the AASIST/RawNet2 reference score files' convention
