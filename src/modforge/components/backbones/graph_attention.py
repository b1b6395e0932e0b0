"""Graph attention layers of AASIST (Jung et al., ICASSP 2022, arXiv:2110.01200).

* :class:`GraphAttentionLayer` — attention over a fully connected graph whose edge weights
  come from the element-wise product of node pairs (the spectral and temporal graphs).
* :class:`HeteroGraphAttentionLayer` — the heterogeneous stacking graph attention layer
  (HS-GAL): two node types joined in one graph, one attention projection per edge type
  (type 1 ↔ type 1, type 2 ↔ type 2, across), plus a stack (master) node that attends
  to every node.
* :class:`GraphPool` — keeps the top ``ratio`` of the nodes by a learned sigmoid score.
* :class:`InferenceBranch` — HS-GAL → graph pools → HS-GAL with residual updates, one of
  AASIST's two parallel branches whose outputs are merged by an element-wise max.

Sizes, dropout rates and the order of operations follow the authors' code
(clovaai/aasist ``models/AASIST.py``, commit a04c986): attention softmaxes over each
node's neighbours, the HS-GAL's three edge types scored with their own vectors (the
reference fills a zero board block by block; here one matmul scores all three and
``where`` picks, the same values), the master node updated from the dropped-out nodes,
pooled nodes scaled by their scores, SELUs in place after batch norm. Shape arithmetic (:func:`kept_nodes`, and
:func:`shortfall` for the padding of short inputs) is written so that TorchScript can
script the layers and a traced ONNX export keeps it dependent on the input length.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = [
    "GraphAttentionLayer",
    "GraphPool",
    "HeteroGraphAttentionLayer",
    "InferenceBranch",
    "kept_nodes",
    "shortfall",
]


def _traced_kept_nodes(n: int, ratio: float) -> int:
    # While tracing (ONNX export), sizes are 0-dim tensors standing in for ints; tensor ops
    # keep the count tied to the input's length in the exported graph, where int() would
    # freeze it. float64 reproduces Python's int(n * ratio) exactly.
    count = torch.floor(torch.as_tensor(n, dtype=torch.float64) * ratio)
    return torch.clamp(count, min=1).to(torch.long)


def kept_nodes(n: int, ratio: float) -> int:
    """How many of ``n`` nodes a pool of ``ratio`` keeps: ``max(int(n × ratio), 1)``."""
    if not torch.jit.is_scripting() and torch.jit.is_tracing():  # TorchScript compiles only the int path
        return _traced_kept_nodes(n, ratio)
    return max(int(n * ratio), 1)


def _traced_shortfall(n: int, minimum: int) -> int:
    # as _traced_kept_nodes: a tensor stand-in for the int, so the export pads any length
    return torch.clamp(torch.as_tensor(minimum) - n, min=0)


def shortfall(n: int, minimum: int) -> int:
    """How much a length ``n`` lacks to reach ``minimum`` (0 when it is long enough)."""
    if not torch.jit.is_scripting() and torch.jit.is_tracing():
        return _traced_shortfall(n, minimum)
    return max(minimum - n, 0)


def _attention_weight(in_dim: int) -> nn.Parameter:
    weight = nn.Parameter(torch.empty(in_dim, 1))
    nn.init.xavier_normal_(weight)
    return weight


class GraphAttentionLayer(nn.Module):
    """Graph attention over all node pairs: ``a_ij = softmax_j(w·tanh(W(x_i ⊙ x_j)) / τ)``,
    output ``SELU(BN(W₁ Σ_j a_ij x_j + W₂ x_i))``.

    Args:
        in_dim: node feature size.
        out_dim: output node feature size.
        temperature: softmax temperature τ.
        dropout: dropout on the input nodes.
    """

    def __init__(self, in_dim: int, out_dim: int, temperature: float = 1.0, dropout: float = 0.2):
        super().__init__()
        self.att_proj = nn.Linear(in_dim, out_dim)
        self.att_weight = _attention_weight(out_dim)
        self.proj_with_att = nn.Linear(in_dim, out_dim)
        self.proj_without_att = nn.Linear(in_dim, out_dim)
        self.bn = nn.BatchNorm1d(out_dim)
        self.input_drop = nn.Dropout(dropout)
        self.temperature = float(temperature)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.input_drop(x)  # [B, N, D]
        pairs = x.unsqueeze(2) * x.unsqueeze(1)  # [B, N, N, D]: x_i ⊙ x_j
        scores = torch.matmul(torch.tanh(self.att_proj(pairs)), self.att_weight).squeeze(-1)
        att = torch.softmax(scores / self.temperature, dim=-1)
        out = self.proj_with_att(torch.matmul(att, x)) + self.proj_without_att(x)
        return F.selu(self.bn(out.reshape(-1, out.size(-1))), inplace=True).reshape(out.shape)  # BN over all nodes


class HeteroGraphAttentionLayer(nn.Module):
    """HS-GAL: graph attention over the union of two node sets with a stack node.

    Each set is first projected by its own linear map; edge scores use a separate
    attention vector within set 1, within set 2 and between the sets; the stack (master)
    node attends to all nodes and is updated as ``W₁ Σ a_i x_i + W₂ master``.

    Args:
        in_dim: node feature size of both sets and the master node.
        out_dim: output node feature size.
        temperature: softmax temperature for node and master attention.
        dropout: dropout on the joined nodes.
    """

    def __init__(self, in_dim: int, out_dim: int, temperature: float = 1.0, dropout: float = 0.2):
        super().__init__()
        self.proj_type1 = nn.Linear(in_dim, in_dim)
        self.proj_type2 = nn.Linear(in_dim, in_dim)
        self.att_proj = nn.Linear(in_dim, out_dim)
        self.att_projM = nn.Linear(in_dim, out_dim)
        self.att_weight11 = _attention_weight(out_dim)
        self.att_weight22 = _attention_weight(out_dim)
        self.att_weight12 = _attention_weight(out_dim)
        self.att_weightM = _attention_weight(out_dim)
        self.proj_with_att = nn.Linear(in_dim, out_dim)
        self.proj_without_att = nn.Linear(in_dim, out_dim)
        self.proj_with_attM = nn.Linear(in_dim, out_dim)
        self.proj_without_attM = nn.Linear(in_dim, out_dim)
        self.bn = nn.BatchNorm1d(out_dim)
        self.input_drop = nn.Dropout(dropout)
        self.temperature = float(temperature)

    def forward(
        self, x1: torch.Tensor, x2: torch.Tensor, master: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x1`` [B, N1, D], ``x2`` [B, N2, D], ``master`` [B or 1, 1, D] → the three updated."""
        n1, n2 = x1.size(1), x2.size(1)
        x = torch.cat([self.proj_type1(x1), self.proj_type2(x2)], dim=1)
        x = self.input_drop(x)
        att = self._node_attention(x, n1)
        master = self._update_master(x, master)
        out = self.proj_with_att(torch.matmul(att, x)) + self.proj_without_att(x)
        out = F.selu(self.bn(out.reshape(-1, out.size(-1))), inplace=True).reshape(out.shape)  # BN over all nodes
        return out.narrow(1, 0, n1), out.narrow(1, n1, n2), master

    def _node_attention(self, x: torch.Tensor, n1: int) -> torch.Tensor:
        hidden = torch.tanh(self.att_proj(x.unsqueeze(2) * x.unsqueeze(1)))  # [B, N, N, D']
        weights = torch.cat([self.att_weight11, self.att_weight22, self.att_weight12], dim=1)
        scores = torch.matmul(hidden, weights)  # [B, N, N, 3]: one score per edge type
        second = torch.arange(x.size(1), device=x.device) >= n1  # node of set 2?
        row, col = second.unsqueeze(1), second.unsqueeze(0)
        within = torch.where(row, scores[..., 1], scores[..., 0])
        scores = torch.where(row == col, within, scores[..., 2])
        return torch.softmax(scores / self.temperature, dim=-1)

    def _update_master(self, x: torch.Tensor, master: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(torch.tanh(self.att_projM(x * master)), self.att_weightM)  # [B, N, 1]
        att = torch.softmax(scores / self.temperature, dim=1)
        return self.proj_with_attM(torch.matmul(att.transpose(1, 2), x)) + self.proj_without_attM(master)


class GraphPool(nn.Module):
    """Graph pooling: score nodes with ``sigmoid(w·x)``, scale them by their score and keep
    the ``max(int(N × ratio), 1)`` best (highest score first).

    Args:
        ratio: fraction of nodes kept, in (0, 1].
        in_dim: node feature size.
        dropout: dropout on the nodes before scoring (the kept nodes are not dropped).
    """

    def __init__(self, ratio: float, in_dim: int, dropout: float = 0.3):
        super().__init__()
        self.ratio = float(ratio)
        self.proj = nn.Linear(in_dim, 1)
        self.drop = nn.Dropout(dropout)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        scores = torch.sigmoid(self.proj(self.drop(h)))  # [B, N, 1]
        _, idx = torch.topk(scores, kept_nodes(h.size(1), self.ratio), dim=1)
        return torch.gather(h * scores, 1, idx.expand(-1, -1, h.size(2)))


class InferenceBranch(nn.Module):
    """One of AASIST's two branches: HS-GAL, pool both node sets, a second HS-GAL whose
    outputs are added to its inputs (temporal nodes, spectral nodes, master node).

    Args:
        in_dim: node size coming in (``gat_dims[0]``).
        out_dim: node size of the branch (``gat_dims[1]``).
        ratio: pool ratio of both node sets.
        temperature: HS-GAL softmax temperature.
        gat_dropout: HS-GAL input dropout.
        pool_dropout: graph-pool scoring dropout.
    """

    def __init__(
        self, in_dim: int, out_dim: int, ratio: float, temperature: float, gat_dropout: float, pool_dropout: float
    ):
        super().__init__()
        self.hs_gal1 = HeteroGraphAttentionLayer(in_dim, out_dim, temperature, gat_dropout)
        self.pool_s = GraphPool(ratio, out_dim, pool_dropout)
        self.pool_t = GraphPool(ratio, out_dim, pool_dropout)
        self.hs_gal2 = HeteroGraphAttentionLayer(out_dim, out_dim, temperature, gat_dropout)

    def forward(
        self, nodes_t: torch.Tensor, nodes_s: torch.Tensor, master: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        t, s, master = self.hs_gal1(nodes_t, nodes_s, master)
        s = self.pool_s(s)
        t = self.pool_t(t)
        t_aug, s_aug, master_aug = self.hs_gal2(t, s, master)
        return t + t_aug, s + s_aug, master + master_aug
