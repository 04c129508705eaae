"""Comparing checkpoints: the reward without penalties, paired statistics, the CLI."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from clitools import run_module
from test_train import QUICK, TINY

from formulation.instance import Instance
from rl.env import Multipliers, PlanEnv, Task
from rl.masks import Budgets
from rl.train import evaluate_greedy, greedy_outcomes, make_policy, train
from rl.validate import paired


def test_the_reward_ignores_the_multipliers_the_lagrangian_does_not():
    """A step cap no plan meets: every plan is over it. Under no multipliers a plan's value
    is its reward; under raised ones its Lagrangian is below its reward, which is what the
    evaluation reports (the plans may differ: the multiplier is a feature)."""
    policy = make_policy(TINY)
    instance = Instance.load(QUICK)
    tasks = [Task(instance, np.array(w), Budgets(step_time=1e-6))
             for w in ((1.0, 0.0, 0.0), (0.2, 0.5, 0.3))]
    env = PlanEnv()
    free = greedy_outcomes(policy, env, tasks, Multipliers())
    assert all(o["violates"] and o["lagrangian"] == o["reward"] for o in free)
    raised = Multipliers()
    raised.values[:] = 2.0
    penalised = greedy_outcomes(policy, env, tasks, raised)
    assert all(o["violates"] and o["lagrangian"] < o["reward"] - 1.0 for o in penalised)
    summary = evaluate_greedy(policy, env, tasks, raised)
    assert summary["eval_reward"] == pytest.approx(np.mean([o["reward"] for o in penalised]))
    assert summary["eval_lagrangian"] == pytest.approx(
        np.mean([o["lagrangian"] for o in penalised]))
    assert summary["eval_violation"] == 1.0


def test_paired_statistics_by_hand():
    stats = paired(np.array([0.1, 0.2, 0.3, 0.4]), np.array([0.2, 0.2, 0.1, 0.6]))
    difference = np.array([0.1, 0.0, -0.2, 0.2])
    assert stats["mean_difference"] == pytest.approx(0.025)
    assert stats["standard_error"] == pytest.approx(difference.std(ddof=1) / 2)
    assert (stats["better"], stats["equal"], stats["worse"]) == (0.5, 0.25, 0.25)


def test_a_checkpoint_against_its_copy_and_a_random_policy(tmp_path: Path):
    """The same weights plan the same on every task (difference 0, all equal); trained
    weights differ from the untrained start somewhere; the JSON holds every task."""
    config = dataclasses.replace(TINY, total_steps=2 * TINY.num_steps)
    train(config, tmp_path / "a.pt", progress=False)
    shutil.copy(tmp_path / "a.pt", tmp_path / "b.pt")
    out = tmp_path / "v.json"
    done = run_module("rl.validate", tmp_path / "a.pt", tmp_path / "b.pt", "--tasks", "6",
                      "--out", out)
    assert done.returncode == 0, done.stderr
    assert "reward" in done.stdout and "+0.0000 +- 0.0000" in done.stdout
    document = json.loads(out.read_text())
    first, second = document["checkpoints"]
    assert len(first["rewards"]) == 6 and first["rewards"] == second["rewards"]
    assert second["against_first"]["equal"] == 1.0
    assert first["feasible"] == second["feasible"] == 1.0
