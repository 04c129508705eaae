"""Compare Hi-PPO checkpoints on the validation tasks, paired task by task.

    python -m rl.validate CHECKPOINT [CHECKPOINT ...] [--tasks N] [--out FILE.json]

Every checkpoint plans greedily (the policy alone, no lower level) on the same ``N``
validation tasks: the first ``N`` that a run of the first checkpoint's configuration draws
for its own evaluation (:func:`rl.train.validation_tasks`; the training's curve uses the
first ``eval_tasks`` of them). Per checkpoint it prints the mean reward of the plans
(``R`` of the objectives, without the Lagrange penalties: the trainer's multipliers rise as
training goes, so a penalised value compares neither iterations nor runs), the share of
plans over a soft constraint (the WAN share cap or the task's step-time cap) and the
feasible share; per checkpoint after the first, the mean paired difference of rewards
against the first, its standard error and the tasks it plans better, equally and worse.
``--out`` writes the same as JSON, with the per-task rewards.

The question it answers: does the PPO phase improve on the cloned policy it starts from
(``python -m rl.validate rl/checkpoints/hi_ppo.cloned.pt rl/checkpoints/hi_ppo.pt``)?
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from formulation.outputs import output_path, write_json
from formulation.schema import CliParser, InputError, integer_arg, run_cli
from rl.env import PlanEnv
from rl.tasks import TaskSampler, TaskSettings
from rl.train import greedy_outcomes, load_checkpoint, validation_tasks
from solvers.front import command_line, versions

MAX_TASKS = 100_000
TIE = 1e-9  # rewards closer than this plan equally well


def paired(reference: np.ndarray, other: np.ndarray) -> dict[str, float]:
    """Mean and standard error of ``other - reference`` task by task, and the shares of
    tasks ``other`` plans better, equally and worse."""
    difference = other - reference
    count = len(difference)
    error = float(difference.std(ddof=1) / np.sqrt(count)) if count > 1 else float("nan")
    return {"mean_difference": float(difference.mean()), "standard_error": error,
            "better": float(np.mean(difference > TIE)),
            "equal": float(np.mean(np.abs(difference) <= TIE)),
            "worse": float(np.mean(difference < -TIE))}


def compare(checkpoints: list[Path], tasks: int) -> dict:
    """Each checkpoint's greedy plans on the first checkpoint's first ``tasks`` validation
    tasks: summary, paired statistics against the first, per-task rewards."""
    payloads = [load_checkpoint(path) for path in checkpoints]  # all checked before work
    config = payloads[0]["config"]
    env = PlanEnv(tasks=TaskSampler(TaskSettings(**config.tasks)))
    drawn = validation_tasks(config, env, tasks)
    rows, rewards = [], []
    for path, payload in zip(checkpoints, payloads, strict=True):
        outcomes = greedy_outcomes(payload["policy"], env, drawn)
        reward = np.array([o["reward"] for o in outcomes])
        row = {"checkpoint": str(path), "iteration": payload.get("iteration"),
               "mean_reward": float(reward.mean()),
               "violation": float(np.mean([o["violates"] for o in outcomes])),
               "feasible": float(np.mean([o["feasible"] for o in outcomes])),
               "rewards": reward.tolist()}
        if rewards:
            row["against_first"] = paired(rewards[0], reward)
        rows.append(row)
        rewards.append(reward)
    return {"command": command_line("rl.validate"), "versions": versions(),
            "tasks": tasks, "task_settings": config.tasks, "seed": config.seed,
            "checkpoints": rows}


def report(document: dict) -> str:
    lines = [f"{document['tasks']} validation tasks (seed {document['seed']}); reward "
             "without penalties, paired against the first checkpoint"]
    for row in document["checkpoints"]:
        line = (f"{row['checkpoint']}: reward {row['mean_reward']:.4f}, over a soft "
                f"constraint {100 * row['violation']:.1f} %, feasible "
                f"{100 * row['feasible']:.1f} %")
        against = row.get("against_first")
        if against:
            line += (f"; {against['mean_difference']:+.4f} +- "
                     f"{against['standard_error']:.4f} (better on "
                     f"{100 * against['better']:.1f} %, equal {100 * against['equal']:.1f} %, "
                     f"worse {100 * against['worse']:.1f} % of tasks)")
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m rl.validate",
                       description="Compare Hi-PPO checkpoints on the validation tasks.")
    parser.add_argument("checkpoints", type=Path, nargs="+",
                        help="checkpoints; the first one's configuration draws the tasks")
    parser.add_argument("--tasks", type=integer_arg(1, MAX_TASKS), default=512,
                        help="validation tasks (default 512)")
    parser.add_argument("--out", type=str, default=None, help="also write JSON here")
    args = parser.parse_args(argv)
    return run_cli(lambda: _validate(args))


def _validate(args: argparse.Namespace) -> None:
    out = output_path(args.out, inputs=args.checkpoints)
    if len({path.resolve() for path in args.checkpoints}) < len(args.checkpoints):
        raise InputError("checkpoints: the same file is named twice")
    document = compare(list(args.checkpoints), args.tasks)
    print(report(document))
    if out is not None:
        write_json(out, document)


if __name__ == "__main__":
    sys.exit(main())
