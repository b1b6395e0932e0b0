"""``modforge describe model CONFIG [--diagram OUT]``: the stages, the batch keys between them and
the losses of the model a config builds, as tables and as a picture."""

from __future__ import annotations

from pathlib import Path

import modforge as mf
from modforge.model.diagram import draw_model_flow, flow_edges

ROOT = Path(__file__).resolve().parents[1]


def test_the_edges_follow_prev_and_the_losses_inputs():
    model = mf.build_model(
        {"stages": [{"name": "a", "kind": "backbone", "type": "mlp", "args": {"hidden_dims": [8]}},
                    {"name": "b", "kind": "backbone", "type": "mlp", "args": {"hidden_dims": [4]}, "prev": "a"},
                    {"name": "h", "kind": "head", "type": "linear", "prev": "a"}],
         "losses": [{"type": "cross_entropy"}]},
        in_dim=6, num_classes=3)  # fmt: skip
    edges = flow_edges(model)
    assert ("input", "a", "batch['input']") in edges and ("a", "h", "batch['a']") in edges
    assert ("a", "b", "batch['a']") in edges and ("h", "logits", "batch['logits']") in edges
    assert any(target.startswith("loss:") and "batch['label']" in key for _, target, key in edges)
    figure = draw_model_flow(model, title="graph")
    assert {t.get_text().split("\n")[0] for t in figure.axes[0].texts} >= {"a", "b", "h", "input", "logits"}


def test_describe_model_of_a_config_prints_the_stages_and_draws_them(cli, tmp_path):
    res = cli("describe", "model", str(ROOT / "configs" / "digits.yaml"), "--diagram", str(tmp_path / "flow.svg"))
    assert res.code == 0, res.err
    for shown in ("global_avg_pool", "batch['backbone']", "cross_entropy", "vector [B, D]"):
        assert shown in res.out, shown
    svg = (tmp_path / "flow.svg").read_text()
    assert svg.lstrip().startswith(("<?xml", "<svg")) and "global_avg_pool" in svg


def test_a_diagram_needs_a_config_and_a_picture_format(cli, tmp_path):
    res = cli("describe", "model", str(ROOT / "configs" / "digits.yaml"), "--diagram", str(tmp_path / "flow.txt"))
    assert res.code == 2 and ".svg, .png or .pdf" in res.err and not (tmp_path / "flow.txt").exists()
    res = cli("describe", "backbone", "mlp", "--diagram", str(tmp_path / "x.svg"))
    assert res.code == 2 and "describe model CONFIG" in res.err
