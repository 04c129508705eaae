"""How exact Hi-PPO's action masks are, on the committed suites.

    python scripts/hippo_masks.py [--episodes 20] [--seed 0]

Per suite: how many exact-front plans can be built step by step under the masks (cut into
segments back to front, as demonstrations are), and how many random admissible episodes end
in a feasible plan (a dead end would stop the script), with the mask time per DOMAIN step.
"""

import argparse
import sys
import time

import numpy as np

from formulation.instance import Instance
from formulation.result import evaluate
from formulation.schema import SEED, CliParser, integer_arg, run_cli
from instances.suites import reference_front_path, suite_paths
from rl.env import PlanEnv, Task
from rl.masks import PlanRules
from solvers.front import Front

MAX_EPISODES = 100_000


def reachable(instance: Instance, front: Front) -> int:
    rules = PlanRules(instance)
    built = [rules.build(point.plan) for point in front.points]
    return sum(state is not None and state.layers_left == 0 for state in built)


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python scripts/hippo_masks.py",
                       description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=integer_arg(1, MAX_EPISODES), default=20,
                        help=f"random admissible episodes per instance (1..{MAX_EPISODES:,})")
    parser.add_argument("--seed", type=SEED, default=0,
                        help="one seed: of the random admissible actions")
    args = parser.parse_args(argv)
    return run_cli(lambda: _masks(args))


def _masks(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(args.seed)
    for suite in ("quick", "bench"):
        points = built = episodes = feasible = 0
        domain_steps: list[float] = []
        for path in suite_paths(suite):
            instance = Instance.load(path)
            front = Front.load(reference_front_path(path), instance)
            points += len(front.points)
            built += reachable(instance, front)
            env = PlanEnv(tasks=lambda r, i=instance: Task(i, r.dirichlet(np.ones(3))))
            for episode in range(args.episodes):
                observation, _ = env.reset(seed=episode)
                while True:
                    start = time.perf_counter()
                    allowed = np.flatnonzero(env.action_masks())
                    if observation["phase"] == 1:
                        domain_steps.append(time.perf_counter() - start)
                    assert len(allowed), f"dead end in {instance.name}"
                    observation, _, done, _, info = env.step(int(rng.choice(allowed)))
                    if done:
                        break
                episodes += 1
                feasible += evaluate(instance, info["plan"]).admissible
        print(f"{suite}: {built}/{points} exact-front plans buildable under the masks; "
              f"{feasible}/{episodes} random admissible episodes feasible; DOMAIN mask "
              f"{1000 * np.median(domain_steps):.2f} ms median, "
              f"{1000 * max(domain_steps):.1f} ms max")


if __name__ == "__main__":
    sys.exit(main())
