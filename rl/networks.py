"""Hi-PPO's actor-critic: a GraphSAGE encoder of the domain graph and one head per phase.

An episode builds one training plan by a sequence of discrete decisions, each made in a
*phase*: the upper level picks a (dp, micro-batch) pair, then, segment by segment, a domain
and its layer count; the lower level, inside the chosen domain, picks a (tp, recompute)
option and a number of pipeline stages. All phases share one flat ``Discrete(A)`` action
space and a boolean action mask, so one network serves both levels: it encodes the graph
once, computes every head for the whole batch and keeps, per sample, the head its phase asks
for. A rollout batch that mixes phases is one forward pass, with no loop over samples.

Why these pieces:

- The graph has 5-20 real domains padded to ``K`` slots. A hand-written GraphSAGE with mean
  aggregation (edge features concatenated to the neighbour's state) is permutation
  equivariant and does not care how many domains are real; padded slots are masked out of
  every sum, so they cannot move a real domain's embedding.
- The DOMAIN decision is a pointer over graph nodes (one logit per node from its embedding
  and a query), so the head works for any number and order of domains.
- The preference weights ``w`` are part of ``context``, and the context embedding feeds every
  head and both values: one network covers the whole preference simplex.
- Masked actions get the most negative finite float as logit, not ``-inf``: softmax gives
  them exactly 0, and a row with every action masked still yields finite (uniform) output
  instead of NaN.
- Orthogonal initialisation as in CleanRL (gain sqrt(2) hidden, 0.01 policy outputs, 1
  value outputs): the initial policy is near uniform over the allowed actions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import torch
from torch import Tensor, nn
from torch.distributions import Categorical

from rl.env import LAYERS, OPTION, PHASES  # the environment numbers the phases

N_PHASES = len(PHASES)
OBS_KEYS = ("node_features", "node_mask", "edge_features", "adjacency", "context", "phase",
            "current_domain", "action_mask")
_INT_KEYS = ("phase", "current_domain")
_BOOL_KEYS = ("node_mask", "action_mask")


def layer_init(layer: nn.Linear, std: float = math.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    """CleanRL's initialisation: orthogonal weights of gain ``std``, constant bias."""
    nn.init.orthogonal_(layer.weight, std)
    if layer.bias is not None:
        nn.init.constant_(layer.bias, bias_const)
    return layer


def mlp(in_dim: int, hidden: int, out_dim: int, out_std: float) -> nn.Sequential:
    """One hidden ReLU layer; ``out_std`` is the output layer's gain (0.01 policy, 1 value)."""
    return nn.Sequential(layer_init(nn.Linear(in_dim, hidden)), nn.ReLU(),
                         layer_init(nn.Linear(hidden, out_dim), std=out_std))


def as_tensors(obs: Mapping[str, np.ndarray | Tensor | int],
               device: torch.device | str = "cpu") -> dict[str, Tensor]:
    """The environment's observation dict as the tensors :class:`HiPPOPolicy` expects.

    Masks become bool, ``phase`` and ``current_domain`` int64, the rest float32. A single
    (unbatched) observation, recognised by a scalar ``phase``, gets a batch dimension of 1.
    Keys other than :data:`OBS_KEYS` are dropped.
    """
    single = np.ndim(obs["phase"]) == 0
    out: dict[str, Tensor] = {}
    for key in OBS_KEYS:
        if key in _INT_KEYS:
            dtype = torch.int64
        elif key in _BOOL_KEYS:
            dtype = torch.bool
        else:
            dtype = torch.float32
        value = torch.as_tensor(np.asarray(obs[key]), device=device).to(dtype)
        out[key] = value.unsqueeze(0) if single else value
    return out


class SAGELayer(nn.Module):
    """``h_k' = ReLU(LayerNorm(W_self h_k + W_neigh mean_{j in N(k)} [h_j || e_jk]))``.

    ``W_neigh`` has no bias, so a node without neighbours gets a zero neighbour term.
    """

    def __init__(self, hidden: int, edge_dim: int):
        super().__init__()
        self.w_self = layer_init(nn.Linear(hidden, hidden))
        self.w_neigh = layer_init(nn.Linear(hidden + edge_dim, hidden, bias=False))
        self.norm = nn.LayerNorm(hidden)

    def forward(self, h: Tensor, mean_adj: Tensor, mean_edges: Tensor) -> Tensor:
        """``mean_adj[b, k, j]`` is ``1/|N(k)|`` for ``j`` in ``N(k)`` and 0 otherwise, so
        ``mean_adj @ h`` is the neighbours' mean state; ``mean_edges`` (B, K, FE) is the mean
        of ``e_jk`` over the same neighbours (it does not change between layers). The mean of
        the concatenation is the concatenation of the means."""
        neighbours = torch.cat([mean_adj @ h, mean_edges], dim=-1)
        return torch.relu(self.norm(self.w_self(h) + self.w_neigh(neighbours)))


class GraphSAGE(nn.Module):
    """Node embeddings (B, K, H) and a masked-mean graph embedding (B, H) of the domain graph.

    Node ``j`` is a neighbour of ``k`` when ``adjacency[b, j, k] > 0`` (an edge ``j -> k``,
    whose features are ``edge_features[b, j, k]``), both are real (``node_mask``) and
    ``j != k``. Padded slots are zeroed at the input and after every layer and left out of
    every mean, so their features cannot reach a real node.
    """

    def __init__(self, node_dim: int, edge_dim: int, hidden: int = 128, n_layers: int = 2):
        super().__init__()
        self.hidden = hidden
        self.input = layer_init(nn.Linear(node_dim, hidden))
        self.layers = nn.ModuleList(SAGELayer(hidden, edge_dim) for _ in range(n_layers))

    def forward(self, node_features: Tensor, node_mask: Tensor, edge_features: Tensor,
                adjacency: Tensor) -> tuple[Tensor, Tensor]:
        real = node_mask.bool()
        k = real.shape[1]
        # pair[b, k, j]: j -> k is an edge between two distinct real domains
        pair = real[:, :, None] & real[:, None, :] & ~torch.eye(k, dtype=torch.bool,
                                                                device=real.device)
        pair = pair & (adjacency.transpose(1, 2) > 0)
        adj = pair.to(node_features.dtype)
        mean_adj = adj / adj.sum(dim=-1, keepdim=True).clamp(min=1.0)
        # e_jk for the message into k, indexed [b, k, j]; torch.where keeps NaN/inf padding out
        edges_in = torch.where(pair[..., None], edge_features.transpose(1, 2), 0.0)
        mean_edges = (mean_adj[..., None] * edges_in).sum(dim=2)

        keep = real[..., None].to(node_features.dtype)
        h = torch.relu(self.input(torch.where(real[..., None], node_features, 0.0))) * keep
        for layer in self.layers:
            h = layer(h, mean_adj, mean_edges) * keep
        pooled = h.sum(dim=1) / keep.sum(dim=1).clamp(min=1.0)
        return h, pooled


class CachedEncoder(nn.Module):
    """An encoder that remembers its last outputs, for decisions at inference: within a
    segment the LAYERS, OPTION and SPLIT steps show the same graph (the node features change
    when a segment is placed), so two of every four steps skip the encoder. Keyed by the
    inputs' bytes; use under ``torch.no_grad()`` only."""

    def __init__(self, encoder: GraphSAGE, size: int = 8):
        super().__init__()
        self.encoder, self.size = encoder, size
        self.memory: dict[bytes, tuple[Tensor, Tensor]] = {}

    def forward(self, node_features: Tensor, node_mask: Tensor, edge_features: Tensor,
                adjacency: Tensor) -> tuple[Tensor, Tensor]:
        key = b"".join(t.numpy().tobytes() for t in (node_features, node_mask,
                                                      edge_features, adjacency))
        out = self.memory.get(key)
        if out is None:
            if len(self.memory) >= self.size:
                self.memory.clear()
            out = self.memory[key] = self.encoder(node_features, node_mask, edge_features,
                                                  adjacency)
        return out


class HiPPOPolicy(nn.Module):
    """Actor-critic over the plan-building episode (module doc).

    Constructor sizes come from the environment: ``node_dim`` (FN), ``edge_dim`` (FE),
    ``context_dim`` (FC), ``n_actions`` (A) and ``k_max`` (K, the padded node count; the
    DOMAIN pointer uses action indices ``0..K-1``, so ``A >= K``).
    """

    def __init__(self, node_dim: int, edge_dim: int, context_dim: int, n_actions: int,
                 k_max: int, hidden: int = 128, n_layers: int = 2):
        super().__init__()
        if n_actions < k_max:
            raise ValueError(f"n_actions ({n_actions}) must be >= k_max ({k_max})")
        self.n_actions = n_actions
        self.k_max = k_max
        h = hidden

        # shared encoder
        self.encoder = GraphSAGE(node_dim, edge_dim, h, n_layers)
        self.context_net = nn.Sequential(layer_init(nn.Linear(context_dim, h)), nn.ReLU(),
                                         layer_init(nn.Linear(h, h)), nn.ReLU())

        # upper policy: PAIR from [pooled, context], LAYERS also from the chosen domain;
        # DOMAIN is a pointer over the nodes
        self.pair_head = mlp(2 * h, h, n_actions, out_std=0.01)
        self.layers_head = mlp(3 * h, h, n_actions, out_std=0.01)  # reads the chosen domain
        self.query = nn.Sequential(layer_init(nn.Linear(2 * h, h)), nn.ReLU())
        self.pointer_node = layer_init(nn.Linear(h, h, bias=False))  # W1
        self.pointer_query = layer_init(nn.Linear(h, h))  # W2
        self.pointer_v = layer_init(nn.Linear(h, 1, bias=False), std=0.01)  # v

        # lower policy: OPTION and SPLIT from [h_current_domain, pooled, context]
        self.option_head = mlp(3 * h, h, n_actions, out_std=0.01)
        self.split_head = mlp(3 * h, h, n_actions, out_std=0.01)

        # critics, one per level, on [pooled, context, h_current_domain]
        self.upper_value = mlp(3 * h, h, 1, out_std=1.0)
        self.lower_value = mlp(3 * h, h, 1, out_std=1.0)

    def forward(self, obs: Mapping[str, Tensor],
                value: bool = True) -> tuple[Tensor, Tensor | None]:
        """Masked logits (B, A) and value (B,) for a batch of observations of any phases
        (each row's head only is computed; ``value=False`` skips the critics: a decision
        at inference needs none)."""
        nodes, pooled = self.encoder(obs["node_features"], obs["node_mask"],
                                     obs["edge_features"], obs["adjacency"])
        ctx = self.context_net(obs["context"])
        phase = obs["phase"].long()
        batch = phase.shape[0]
        neg = torch.finfo(nodes.dtype).min

        # The current domain's embedding; zero before a domain is chosen (phases PAIR and
        # DOMAIN), where current_domain carries no meaning.
        current = obs["current_domain"].long().clamp(0, self.k_max - 1)
        h_cur = nodes[torch.arange(batch, device=nodes.device), current]
        h_cur = torch.where((phase >= LAYERS)[:, None], h_cur, 0.0)

        graph_ctx = torch.cat([pooled, ctx], dim=-1)
        local_ctx = torch.cat([h_cur, pooled, ctx], dim=-1)

        def pointer(rows: Tensor) -> Tensor:
            # DOMAIN pointer: logit_k = v^T tanh(W1 h_k + W2 q); padded nodes and indices
            # >= K get the mask value whatever the action mask says.
            q = self.query(graph_ctx[rows])
            logit = self.pointer_v(torch.tanh(self.pointer_node(nodes[rows])
                                              + self.pointer_query(q)[:, None, :])).squeeze(-1)
            logit = logit.masked_fill(~obs["node_mask"][rows].bool(), neg)
            return torch.cat([logit, logit.new_full((len(rows), self.n_actions - self.k_max),
                                                    neg)], dim=-1)

        heads = (lambda rows: self.pair_head(graph_ctx[rows]), pointer,
                 lambda rows: self.layers_head(local_ctx[rows]),
                 lambda rows: self.option_head(local_ctx[rows]),
                 lambda rows: self.split_head(local_ctx[rows]))
        logits = nodes.new_full((batch, self.n_actions), neg)
        for number, head in enumerate(heads):
            rows = torch.nonzero(phase == number).squeeze(-1)
            if len(rows) == batch:
                logits = head(rows)
            elif len(rows):
                logits = logits.index_copy(0, rows, head(rows))
        logits = logits.masked_fill(~obs["action_mask"].bool(), neg)
        if not value:
            return logits, None

        value_in = torch.cat([pooled, ctx, h_cur], dim=-1)
        values = torch.where(phase >= OPTION, self.lower_value(value_in).squeeze(-1),
                             self.upper_value(value_in).squeeze(-1))
        return logits, values

    def act(self, obs: Mapping[str, Tensor], deterministic: bool = False,
            generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(action, log_prob, entropy, value)``, each (B,). Sampling draws from the masked
        distribution with ``generator`` (reproducible rollouts); ``deterministic`` takes the
        argmax. Wrap in ``torch.no_grad()`` for rollouts."""
        logits, value = self(obs)
        dist = Categorical(logits=logits)
        if deterministic:
            action = logits.argmax(dim=-1)
        else:
            action = torch.multinomial(dist.probs, 1, generator=generator).squeeze(-1)
        return action, dist.log_prob(action), dist.entropy(), value

    def evaluate_actions(self, obs: Mapping[str, Tensor],
                         actions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(log_prob, entropy, value)`` of given actions, each (B,), for the PPO update."""
        logits, value = self(obs)
        dist = Categorical(logits=logits)
        return dist.log_prob(actions.long()), dist.entropy(), value
