"""Hi-PPO's network: shapes, exact masking, the DOMAIN pointer's bounds, padding isolation,
permutation equivariance, conditioning on the preference weights, act/evaluate agreement,
checkpoint round trip and gradient flow from both levels."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rl.env import DOMAIN, LAYERS, OPTION, PAIR, SPLIT
from rl.networks import N_PHASES, GraphSAGE, HiPPOPolicy, as_tensors

FN, FE, FC, A, K = 8, 4, 24, 128, 20
W_SLICE = slice(N_PHASES, N_PHASES + 3)  # context: phase one-hot, then the weights w


def make_policy(seed: int = 0) -> HiPPOPolicy:
    torch.manual_seed(seed)
    return HiPPOPolicy(FN, FE, FC, A, K)


def random_obs(batch: int, seed: int = 0, phase: int | None = None) -> dict[str, torch.Tensor]:
    """A batch of plausible observations: 3..K real domains first, random symmetric edges,
    phases cycling through all five unless ``phase`` is given, a non-empty action mask."""
    g = torch.Generator().manual_seed(seed)
    n_real = torch.randint(3, K + 1, (batch,), generator=g)
    node_mask = torch.arange(K)[None, :] < n_real[:, None]
    pair = node_mask[:, :, None] & node_mask[:, None, :] & ~torch.eye(K, dtype=torch.bool)
    adjacency = torch.rand(batch, K, K, generator=g) < 0.6
    adjacency = (adjacency | adjacency.transpose(1, 2)) & pair
    phases = (torch.arange(batch) % N_PHASES if phase is None
              else torch.full((batch,), phase, dtype=torch.int64))
    context = torch.randn(batch, FC, generator=g)
    context[:, :N_PHASES] = torch.nn.functional.one_hot(phases, N_PHASES).float()
    w = torch.rand(batch, 3, generator=g)
    context[:, W_SLICE] = w / w.sum(dim=1, keepdim=True)
    current = (torch.rand(batch, generator=g) * n_real).long()
    current = torch.where(phases >= LAYERS, current, 0)

    action_mask = torch.rand(batch, A, generator=g) < 0.3
    domain_mask = torch.zeros(batch, A, dtype=torch.bool)
    domain_mask[:, :K] = node_mask & (torch.rand(batch, K, generator=g) < 0.7)
    is_domain = phases == DOMAIN
    action_mask = torch.where(is_domain[:, None], domain_mask, action_mask)
    # at least one allowed action per row (a real node in the DOMAIN phase)
    rows = torch.arange(batch)
    forced = torch.where(is_domain, current % n_real, torch.randint(0, A, (batch,), generator=g))
    action_mask[rows, forced] = True
    return {
        "node_features": torch.randn(batch, K, FN, generator=g) * node_mask[..., None],
        "node_mask": node_mask,
        "edge_features": torch.rand(batch, K, K, FE, generator=g) * pair[..., None],
        "adjacency": adjacency.float(),
        "context": context,
        "phase": phases,
        "current_domain": current,
        "action_mask": action_mask,
    }


def test_shapes_for_a_batch_of_mixed_phases() -> None:
    policy = make_policy()
    obs = random_obs(20)
    n_params = sum(p.numel() for p in policy.parameters())
    print(f"HiPPOPolicy parameters: {n_params}")
    assert n_params < 1_000_000
    logits, value = policy(obs)
    assert logits.shape == (20, A) and value.shape == (20,)
    nodes, pooled = policy.encoder(obs["node_features"], obs["node_mask"],
                                   obs["edge_features"], obs["adjacency"])
    assert nodes.shape == (20, K, 128) and pooled.shape == (20, 128)
    action, log_prob, entropy, value = policy.act(obs)
    for t in (action, log_prob, entropy, value):
        assert t.shape == (20,)
    assert torch.isfinite(logits).all() and torch.isfinite(value).all()


def test_masked_actions_have_zero_probability_and_are_never_sampled() -> None:
    policy = make_policy()
    obs = random_obs(40, seed=1)
    mask = obs["action_mask"]
    with torch.no_grad():
        logits, _ = policy(obs)
        probs = torch.softmax(logits, dim=-1)
        assert (probs[~mask] == 0).all()
        gen = torch.Generator().manual_seed(0)
        rows = torch.arange(40)
        for _ in range(100):
            action, log_prob, _, _ = policy.act(obs, generator=gen)
            assert mask[rows, action].all()
            assert torch.isfinite(log_prob).all()
        action, _, _, _ = policy.act(obs, deterministic=True)
        assert mask[rows, action].all()
        assert torch.equal(action, logits.argmax(dim=-1))


def test_domain_phase_never_picks_a_padded_node_or_an_index_beyond_k() -> None:
    policy = make_policy()
    obs = random_obs(30, seed=2, phase=DOMAIN)
    obs["action_mask"] = torch.ones(30, A, dtype=torch.bool)  # the pointer must bound itself
    with torch.no_grad():
        probs = torch.softmax(policy(obs)[0], dim=-1)
        assert (probs[:, K:] == 0).all()
        assert (probs[:, :K][~obs["node_mask"]] == 0).all()
        gen = torch.Generator().manual_seed(1)
        for _ in range(100):
            action = policy.act(obs, generator=gen)[0]
            assert (action < K).all()
            assert obs["node_mask"][torch.arange(30), action].all()


def test_padded_nodes_do_not_change_real_nodes_or_logits() -> None:
    policy = make_policy()
    obs = random_obs(25, seed=3)
    padded = ~obs["node_mask"]
    assert padded.any()
    other = dict(obs)
    other["node_features"] = torch.where(padded[..., None], 100.0, obs["node_features"])
    touches_pad = padded[:, :, None] | padded[:, None, :]
    other["edge_features"] = torch.where(touches_pad[..., None], float("nan"),
                                         obs["edge_features"])
    other["adjacency"] = torch.where(touches_pad, 1.0, obs["adjacency"])
    with torch.no_grad():
        args = ("node_features", "node_mask", "edge_features", "adjacency")
        nodes, pooled = policy.encoder(*(obs[a] for a in args))
        nodes2, pooled2 = policy.encoder(*(other[a] for a in args))
        real = obs["node_mask"]
        torch.testing.assert_close(nodes2[real], nodes[real], atol=1e-6, rtol=0)
        torch.testing.assert_close(pooled2, pooled, atol=1e-6, rtol=0)
        for got, want in zip(policy(other), policy(obs), strict=True):
            torch.testing.assert_close(got, want, atol=1e-6, rtol=0)


def test_isolated_nodes_and_an_all_masked_row_give_no_nan() -> None:
    policy = make_policy()
    obs = random_obs(10, seed=4)
    obs["adjacency"][0] = 0.0  # every domain of row 0 without neighbours
    obs["action_mask"][1] = False  # row 1 allows nothing
    with torch.no_grad():
        encoder = GraphSAGE(FN, FE)
        nodes, pooled = encoder(obs["node_features"][:1], obs["node_mask"][:1],
                                obs["edge_features"][:1], obs["adjacency"][:1])
        assert torch.isfinite(nodes).all() and torch.isfinite(pooled).all()
        logits, value = policy(obs)
        assert torch.isfinite(logits).all() and torch.isfinite(value).all()
        action, log_prob, entropy, _ = policy.act(obs, generator=torch.Generator())
        assert torch.isfinite(log_prob).all() and torch.isfinite(entropy).all()


def test_permuting_domains_permutes_the_domain_logits() -> None:
    policy = make_policy()
    obs = random_obs(30, seed=5)
    # new slot i holds old node perm[i]
    perm = torch.randperm(K, generator=torch.Generator().manual_seed(7))
    inverse = torch.argsort(perm)
    is_domain = obs["phase"] == DOMAIN
    permuted = dict(obs)
    permuted["node_features"] = obs["node_features"][:, perm]
    permuted["node_mask"] = obs["node_mask"][:, perm]
    permuted["edge_features"] = obs["edge_features"][:, perm][:, :, perm]
    permuted["adjacency"] = obs["adjacency"][:, perm][:, :, perm]
    permuted["current_domain"] = torch.where(obs["phase"] >= LAYERS,
                                             inverse[obs["current_domain"]], 0)
    mask = obs["action_mask"].clone()
    mask[is_domain, :K] = obs["action_mask"][is_domain][:, perm]
    permuted["action_mask"] = mask
    with torch.no_grad():
        logits, value = policy(obs)
        logits_p, value_p = policy(permuted)
    expected = logits.clone()
    expected[is_domain, :K] = logits[is_domain][:, perm]
    torch.testing.assert_close(logits_p, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(value_p, value, atol=1e-5, rtol=0)


@pytest.mark.parametrize("phase", [PAIR, DOMAIN, LAYERS, OPTION, SPLIT])
def test_preference_weights_condition_the_logits_and_value(phase: int) -> None:
    policy = make_policy()
    obs = random_obs(12, seed=6, phase=phase)
    other = dict(obs)
    other["context"] = obs["context"].clone()
    other["context"][:, W_SLICE] = torch.tensor([0.8, 0.1, 0.1])
    obs["context"][:, W_SLICE] = torch.tensor([0.1, 0.1, 0.8])
    with torch.no_grad():
        logits, value = policy(obs)
        logits2, value2 = policy(other)
    mask = obs["action_mask"]
    diff = torch.where(mask, (logits - logits2).abs(), 0.0).amax(dim=1)
    assert (diff > 1e-6).all()
    assert ((value - value2).abs() > 1e-6).all()


def test_lower_heads_read_the_current_domain() -> None:
    policy = make_policy()
    obs = random_obs(12, seed=8, phase=OPTION)
    obs["node_mask"][:] = True
    obs["current_domain"] = torch.zeros(12, dtype=torch.int64)
    other = dict(obs, current_domain=torch.ones(12, dtype=torch.int64))
    with torch.no_grad():
        diff = (policy(obs)[0] - policy(other)[0]).abs()
    assert (torch.where(obs["action_mask"], diff, 0.0).amax(dim=1) > 1e-7).all()


def test_evaluate_actions_matches_act() -> None:
    policy = make_policy()
    obs = random_obs(40, seed=9)
    with torch.no_grad():
        action, log_prob, entropy, value = policy.act(obs, generator=torch.Generator())
        log_prob2, entropy2, value2 = policy.evaluate_actions(obs, action)
    torch.testing.assert_close(log_prob2, log_prob, atol=1e-6, rtol=0)
    torch.testing.assert_close(entropy2, entropy, atol=1e-6, rtol=0)
    torch.testing.assert_close(value2, value, atol=1e-6, rtol=0)


def test_state_dict_round_trip_gives_identical_outputs(tmp_path) -> None:
    policy = make_policy(seed=0)
    path = tmp_path / "policy.pt"
    torch.save(policy.state_dict(), path)
    restored = make_policy(seed=1)
    restored.load_state_dict(torch.load(path, weights_only=True))
    obs = random_obs(20, seed=10)
    with torch.no_grad():
        for got, want in zip(restored(obs), policy(obs), strict=True):
            assert torch.equal(got, want)


@pytest.mark.parametrize("phase", [PAIR, DOMAIN, LAYERS, OPTION, SPLIT])
def test_policy_and_value_gradients_reach_the_encoder(phase: int) -> None:
    """An upper-phase and a lower-phase loss both train the shared encoder."""
    policy = make_policy()
    obs = random_obs(16, seed=11, phase=phase)
    with torch.no_grad():
        action = policy.act(obs, generator=torch.Generator())[0]
    log_prob, _, value = policy.evaluate_actions(obs, action)
    for loss in (-log_prob.mean(), value.pow(2).mean()):
        policy.zero_grad()
        loss.backward(retain_graph=True)
        for name, p in [*policy.encoder.named_parameters(), *policy.context_net.named_parameters()]:
            assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_as_tensors_batches_a_single_numpy_observation() -> None:
    obs = {key: value[0].numpy() for key, value in random_obs(1, seed=12).items()}
    obs["phase"] = np.int64(obs["phase"])
    obs["action_mask"] = obs["action_mask"].astype(np.int8)
    tensors = as_tensors(obs)
    assert tensors["node_features"].shape == (1, K, FN)
    assert tensors["phase"].dtype == torch.int64 and tensors["phase"].shape == (1,)
    assert tensors["action_mask"].dtype == torch.bool
    logits, value = make_policy()(tensors)
    assert logits.shape == (1, A) and value.shape == (1,)
