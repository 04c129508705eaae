"""Hi-PPO training: config, hierarchy of updates, learning, determinism, resuming, errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from clitools import run_module

from formulation.instance import Instance
from formulation.schema import InputError
from instances.suites import PREFERENCES, SUITES_DIR
from rl.env import BUCKETS, MULTIPLIER_CAP, SOFT_CONSTRAINTS, Multipliers, PlanEnv, Task
from rl.tasks import TaskSampler, TaskSettings
from rl.train import (
    DEFAULT_CONFIG,
    HiPPOConfig,
    collect,
    evaluate_greedy,
    level_parameters,
    load_checkpoint,
    make_policy,
    train,
    update,
)

QUICK = SUITES_DIR / "quick" / "cn-hubs-k6-llama2-7b-s130.json"
TINY = HiPPOConfig(num_steps=128, update_epochs=2, minibatch_size=64, total_steps=256,
                   eval_every=100, eval_tasks=2, checkpoint_every=1,
                   tasks={"instance": str(QUICK)})


def test_committed_config_holds_the_seeds_values():
    config = HiPPOConfig.load(DEFAULT_CONFIG)
    assert config.imitation is not None and config.imitation["experts"]
    assert (config.learning_rate, config.gamma, config.gae_lambda, config.clip_coef) == \
        (3e-4, 0.99, 0.95, 0.2)
    assert (config.ent_coef, config.vf_coef, config.max_grad_norm, config.target_kl) == \
        (0.01, 0.5, 0.5, 0.02)
    assert (config.num_steps, config.update_epochs, config.minibatch_size) == (2048, 10, 256)
    assert config.hidden == 128


@pytest.mark.parametrize(("text", "needle"), [
    ("learning_rat: 0.1\n", "unknown field 'learning_rat'"),
    ("tasks: {pools: 3}\n", "unknown field tasks.pools"),
    ("- 1\n- 2\n", "must be a mapping"),
    ("", "is empty \\(write {} for every default\\)"),
    ("# only a comment\n", "is empty"),
    ("imitation: {epoch: 3}\n", "unknown field imitation.epoch"),
    ("imitation: {experts: [sailor, oracle]}\n", "unknown planner 'oracle'"),
])
def test_bad_configs_name_the_problem(tmp_path: Path, text: str, needle: str):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=needle):
        HiPPOConfig.load(path)


def test_lower_turn_leaves_the_upper_level_untouched():
    torch.manual_seed(0)
    policy = make_policy(TINY)
    upper, lower = level_parameters(policy)
    optimizers = (torch.optim.Adam(upper, lr=1e-3), torch.optim.Adam(lower, lr=1e-3))
    env = PlanEnv(tasks=lambda rng: Task(Instance.load(QUICK), rng.dirichlet(np.ones(3))))
    rollout = collect(env, policy, 128, seed=0, multipliers=Multipliers())
    before = [p.detach().clone() for p in upper], [p.detach().clone() for p in lower]
    update(policy, optimizers, rollout, TINY, upper_turn=False,
           generator=torch.Generator().manual_seed(0))
    assert all(torch.equal(a, b) for a, b in zip(before[0], upper, strict=True))
    assert any(not torch.equal(a, b) for a, b in zip(before[1], lower, strict=True))
    update(policy, optimizers, rollout, TINY, upper_turn=True,
           generator=torch.Generator().manual_seed(0))
    assert any(not torch.equal(a, b) for a, b in zip(before[0], upper, strict=True))


def test_a_short_run_beats_a_random_policy(tmp_path: Path):
    """4096 decisions on one quick instance: the greedy policy's plans earn more reward over
    the suite's preference vectors than random admissible plans."""
    config = dataclasses.replace(TINY, num_steps=512, update_epochs=4, minibatch_size=128,
                                 total_steps=4096, checkpoint_every=100)
    payload = train(config, tmp_path / "run.pt", progress=False)
    policy = make_policy(config)
    policy.load_state_dict(payload["policy"])
    instance = Instance.load(QUICK)
    tasks = [Task(instance, np.array(w)) for w in PREFERENCES]
    env = PlanEnv()
    greedy = evaluate_greedy(policy, env, tasks, Multipliers())
    assert greedy["eval_feasible"] == 1.0
    rng, random_rewards = np.random.default_rng(0), []
    for task in tasks:
        for _ in range(10):
            observation, _ = env.reset(options={"instance": instance, "weights": task.weights})
            while True:
                action = rng.choice(np.flatnonzero(observation["action_mask"]))
                observation, value, terminated, truncated, _ = env.step(int(action))
                if terminated or truncated:
                    random_rewards.append(value)
                    break
    assert greedy["eval_reward"] > np.mean(random_rewards) + 0.05


def test_same_seed_same_weights_and_resume_continues_exactly(tmp_path: Path):
    config = dataclasses.replace(TINY, total_steps=3 * TINY.num_steps)
    whole = train(config, tmp_path / "whole.pt", progress=False)
    again = train(config, tmp_path / "again.pt", progress=False)
    for key, value in whole["policy"].items():
        assert torch.equal(value, again["policy"][key]), key
    first = dataclasses.replace(config, total_steps=TINY.num_steps)
    train(first, tmp_path / "split.pt", progress=False)
    resumed = train(config, tmp_path / "split.pt", resume=True, progress=False)
    assert resumed["iteration"] == whole["iteration"] == 3
    for key, value in whole["policy"].items():
        assert torch.equal(value, resumed["policy"][key]), key
    assert [row["mean_return"] for row in resumed["curve"]] == \
        [row["mean_return"] for row in whole["curve"]]


def test_drawn_tasks_always_admit_a_plan_within_their_budgets():
    """Budgets are drawn blind to the instance's plans; the environment draws again (and
    at last drops them) so that neither training nor validation meets an impossible one."""
    sampler = TaskSampler(TaskSettings(pool=4, max_domains=8, gpu_budget_share=1.0,
                                       cost_budget_share=1.0, step_cap_share=1.0))
    env = PlanEnv(tasks=sampler)
    rng = np.random.default_rng(0)
    budgeted = 0
    for _ in range(40):
        task = env.draw(sampler, rng)
        budgeted += task.budgets.any
        env.reset(options={"instance": task.instance, "weights": task.weights,
                           "budgets": task.budgets})  # raises if no plan fits
    assert budgeted >= 20


def test_dual_ascent_raises_each_bucket_by_its_own_excess():
    multipliers = Multipliers()
    episodes = [{"constraints": [0.0, 0.4], "bucket": 2}, {"constraints": [0.0, 0.2],
                                                         "bucket": 2},
                {"constraints": [0.1, 0.0], "bucket": 0}]
    multipliers.ascend(episodes, step=0.5)
    assert multipliers.values.shape == (len(SOFT_CONSTRAINTS), BUCKETS)
    assert multipliers.values[1, 2] == pytest.approx(0.15)
    assert multipliers.values[0, 0] == pytest.approx(0.05)
    assert multipliers.values.sum() == pytest.approx(0.2)
    multipliers.ascend([{"constraints": [0.0, 0.0], "bucket": 2}], step=1.0)
    assert multipliers.values[1, 2] == pytest.approx(0.15)  # never below 0, no decay
    multipliers.ascend([{"constraints": [0.0, 100.0], "bucket": 2}], step=1.0)
    assert multipliers.values[1, 2] == MULTIPLIER_CAP


def test_missing_or_foreign_checkpoint_is_a_clear_error(tmp_path: Path):
    with pytest.raises(InputError, match="no such file"):
        load_checkpoint(tmp_path / "none.pt")
    junk = tmp_path / "junk.pt"
    junk.write_text("not a checkpoint")
    with pytest.raises(InputError, match="not a Hi-PPO checkpoint"):
        load_checkpoint(junk)


def test_cli_rejects_a_missing_config(tmp_path: Path):
    out = tmp_path / "ck.pt"
    done = run_module("rl.train", "--config", tmp_path / "none.yaml", "--out", out)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "none.yaml" in done.stderr
    assert not out.exists()


def test_imitation_warm_start_is_recorded_and_not_repeated_on_resume(tmp_path: Path):
    imitation = {"states": 1, "random_preferences": 1, "epochs": 2, "workers": 1,
                 "polish": 2, "holdout": 0.25, "budget_levels": 0, "cost_levels": 0}
    config = dataclasses.replace(TINY, total_steps=2 * TINY.num_steps, imitation=imitation)
    whole = train(config, tmp_path / "whole.pt", progress=False)
    stats = whole["imitation"]
    assert stats["episodes"] == 8 and stats["decisions"] >= 8 * 5
    assert 0 <= stats["held_out_accuracy"] <= 1 and stats["eval_feasible"] == 1.0
    first = dataclasses.replace(config, total_steps=TINY.num_steps)
    train(first, tmp_path / "split.pt", progress=False)
    resumed = train(config, tmp_path / "split.pt", resume=True, progress=False)
    assert resumed["imitation"]["clone_loss"] == stats["clone_loss"]
    for key, value in whole["policy"].items():
        assert torch.equal(value, resumed["policy"][key]), key
