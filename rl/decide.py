"""Hi-PPO decisions: a plan for an instance state and a preference, with its explanation.

    python -m rl.decide INSTANCE --weights w1,w2,w3 [--samples N] [--polish ROUNDS]
                        [--seed S] [--checkpoint FILE] [--heatmap FILE.png] [--out PLAN.json]

prints JSON: the plan, its objectives and evaluation (from the evaluator), the decision
latency, the reward decomposition (R_eff, R_util, R_cost and R) and a rule summary: which
links (bandwidth, latency, share of the 1F1B period they keep busy), memory limits and GPU
counts drove the chain and the cuts, and which term sets the period. ``--samples N`` also
draws N plans from the policy and keeps the one with the best reward. ``--polish ROUNDS``
also improves each plan by at most that many rounds of local search on the reward
(:mod:`solvers.local_search`; the decision latency includes it). ``--heatmap`` draws the
cross-domain traffic (GB per step between domains).

:class:`Scheduler` is the API; :meth:`Scheduler.front` sweeps preference vectors (and
optional samples) into a front in the common format.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from formulation.evaluator import cost_model
from formulation.instance import Instance
from formulation.plan import Plan
from formulation.result import Evaluation, evaluate
from formulation.reward import check_weights, reward, reward_terms
from formulation.schema import CliParser, InputError, run_cli, write_json_atomic
from instances.suites import PREFERENCES
from rl.env import NoFeasiblePlan, PlanEnv
from rl.networks import OBS_KEYS, HiPPOPolicy, as_tensors
from rl.train import HiPPOConfig, load_checkpoint, make_policy
from solvers.front import Front, versions
from solvers.local_search import local_search

DEFAULT_CHECKPOINT = Path(__file__).resolve().parent / "checkpoints" / "hi_ppo.pt"
TIGHT_MEMORY = 0.1  # a stage with less headroom than this share of memory is memory-bound


def preference_grid(steps: int = 10) -> list[tuple[float, float, float]]:
    """Every (i, j, k) / steps with i + j + k = steps: a regular grid on the simplex of
    preference vectors (66 vectors for 10 steps)."""
    return [(i / steps, j / steps, (steps - i - j) / steps)
            for i in range(steps + 1) for j in range(steps + 1 - i)]


@dataclass
class Decision:
    plan: Plan
    evaluation: Evaluation
    weights: np.ndarray
    latency_s: float
    reward: dict[str, float]
    explanation: list[str]

    def to_dict(self, instance: Instance) -> dict:
        return {"plan": self.plan.to_dict(instance),
                "objectives": list(self.evaluation.objectives),
                "evaluation": self.evaluation.to_dict(), "weights": self.weights.tolist(),
                "latency_s": self.latency_s, "reward": self.reward,
                "explanation": self.explanation}


class Scheduler:
    """The trained policy behind a one-call decision API (loaded once, CPU, one thread)."""

    def __init__(self, checkpoint: str | Path = DEFAULT_CHECKPOINT):
        payload = load_checkpoint(checkpoint)
        try:
            self.policy: HiPPOPolicy = make_policy(HiPPOConfig(**payload["config"]))
            self.policy.load_state_dict(payload["policy"])
        except (KeyError, TypeError, RuntimeError) as err:
            raise InputError(f"checkpoint {str(checkpoint)!r}: not a Hi-PPO checkpoint "
                             f"({type(err).__name__})") from None
        self.policy.eval()
        self.checkpoint = str(checkpoint)
        self.env = PlanEnv()
        self.envs = [self.env]  # one per episode run in lockstep (:meth:`_episodes`)
        torch.set_num_threads(1)

    def _episodes(self, instance: Instance, weights: np.ndarray, samples: int,
                  generator: torch.Generator) -> list[tuple[Plan, float]]:
        """The greedy episode and ``samples`` sampled ones, run in lockstep: one batched
        forward pass per step for all the episodes still building (a small network costs
        about the same for one observation as for several)."""
        while len(self.envs) < samples + 1:  # the envs share one cache of instance rules
            self.envs.append(PlanEnv(caches=self.env.caches))
        envs = self.envs[:samples + 1]
        observations = [env.reset(options={"instance": instance, "weights": weights})[0]
                        for env in envs]
        results: list[tuple[Plan, float] | None] = [None] * len(envs)
        active = list(range(len(envs)))
        while active:
            batch = {key: np.stack([observations[i][key] for i in active])
                     for key in OBS_KEYS}
            with torch.no_grad():
                logits, _ = self.policy(as_tensors(batch))
                actions = logits.argmax(dim=-1)
                sampled = 1 if active[0] == 0 else 0  # the first sampled row (0: greedy)
                if len(active) > sampled:
                    probs = torch.softmax(logits[sampled:], dim=-1)
                    actions[sampled:] = torch.multinomial(probs, 1, generator=generator)[:, 0]
            still = []
            for i, action in zip(active, actions.tolist(), strict=True):
                observations[i], value, terminated, _, info = envs[i].step(int(action))
                if info.get("invalid_action"):  # cannot happen with the masks; fail loudly
                    raise RuntimeError("the policy left the action mask")
                if terminated:
                    results[i] = (info["plan"], value)
                else:
                    still.append(i)
            active = still
        return results

    def plans(self, instance: Instance, weights, samples: int = 0, seed: int = 0,
              polish: int = 0) -> list[tuple[Plan, float]]:
        """The greedy plan and ``samples`` sampled ones, each with its reward, and with
        ``polish`` > 0 the local optima reached from them by at most that many rounds of
        local search; none where the instance admits no plan at all."""
        weights = np.asarray(weights, dtype=float)
        generator = torch.Generator().manual_seed(seed)
        try:  # the first reset raises, before any sampling
            out = self._episodes(instance, weights, samples, generator)
        except NoFeasiblePlan:
            return []
        if polish > 0:
            scale = self.env.cache.scale
            out += [local_search(instance, plan, weights, scale, rounds=polish)
                    for plan, _ in out]
        return out

    def decide(self, instance: Instance, weights, samples: int = 0, seed: int = 0,
               polish: int = 0) -> Decision:
        """The best-rewarded of the greedy, sampled and polished plans, timed and
        explained."""
        start = time.perf_counter()
        candidates = self.plans(instance, weights, samples, seed, polish)
        if not candidates:
            raise InputError(f"instance {instance.name!r}: no feasible plan exists (the "
                             "model fits in no combination of the free GPUs)")
        plan, _ = max(candidates, key=lambda item: item[1])
        latency = time.perf_counter() - start
        weights = np.asarray(weights, dtype=float)
        result = evaluate(instance, plan)
        scale = self.env.cache.scale
        objectives = np.array([result.objectives], dtype=float)
        terms = reward_terms(objectives, scale)[0]
        total = float(reward(objectives, weights, scale)[0])
        return Decision(plan, result, weights, latency,
                        {"R_eff": float(terms[0]), "R_util": float(terms[1]),
                         "R_cost": float(terms[2]), "R": total,
                         "T_base_s": scale.t_base, "C_base_usd": scale.c_base},
                        explain(instance, plan, result))

    def front(self, instance: Instance, preferences=PREFERENCES, samples: int = 0,
              seed: int = 0, polish: int = 0) -> Front:
        """Plans for every preference vector (greedy plus samples, and their polished
        versions) as a heuristic front."""
        start = time.perf_counter()
        plans = [plan for w in preferences
                 for plan, _ in self.plans(instance, w, samples, seed, polish)]
        front = Front.from_plans(instance, plans, "heuristic")
        front.provenance = {"command": "rl.decide.Scheduler.front()", "method": "hippo",
                            "versions": {**versions(), "torch": torch.__version__},
                            "parameters": {"checkpoint": self.checkpoint, "samples": samples,
                                           "seed": seed, "polish": polish,
                                           "preferences": [list(w) for w in preferences]},
                            "wall_time_s": round(time.perf_counter() - start, 4),
                            "decisions": len(plans)}
        return front


def explain(instance: Instance, plan: Plan, result: Evaluation) -> list[str]:
    """Which links, memory limits and GPU counts shaped the plan (module doc)."""
    cm = cost_model(instance)
    names = cm.domain_names
    lines = []
    chain = " -> ".join(dict.fromkeys(names[s.domain] for s in plan.stages))
    lines.append(f"chain (front to back): {chain}; dp {plan.dp}, micro-batch "
                 f"{plan.micro_batch}, {plan.num_stages} stages")
    period = result.breakdown["period_s"]
    bandwidth = instance.links.bandwidth_gbps
    for a, z in zip(plan.stages, plan.stages[1:], strict=False):
        if a.domain == z.domain:
            continue
        occupancy, delay, _, _ = cm.boundary_terms(a.domain, z.domain, plan.micro_batch,
                                                   plan.dp)
        others = np.delete(bandwidth[a.domain], a.domain)
        rank = int((others > bandwidth[a.domain, z.domain]).sum()) + 1
        lines.append(f"WAN cut {names[a.domain]} -> {names[z.domain]}: "
                     f"{bandwidth[a.domain, z.domain]:.2f} Gbit/s (rank {rank} of "
                     f"{len(others)} links from {names[a.domain]}), "
                     f"{instance.links.latency_ms[a.domain, z.domain]:.0f} ms, busy "
                     f"{100 * occupancy / period:.0f} % of the period")
    for stage, row in zip(plan.stages, result.stages, strict=True):
        if row["memory_headroom_gb"] < TIGHT_MEMORY * result.usable_memory_gb:
            lines.append(f"memory-bound cut: {row['layers']} layers in {row['domain']} use "
                         f"{row['memory_gb']:.1f} of {result.usable_memory_gb:.1f} GB "
                         f"(tp {stage.tp}, recompute {stage.recompute}, "
                         f"{row['in_flight']} micro-batches in flight)")
    used = np.bincount([s.domain for s in plan.stages],
                       weights=[plan.dp * s.tp for s in plan.stages],
                       minlength=instance.num_domains)
    full = [names[k] for k in range(instance.num_domains)
            if used[k] and used[k] == instance.domains[k].free_gpus]
    if full:
        lines.append(f"all free GPUs taken in: {', '.join(full)}")
    compute = max(result.stage_compute_s)
    busiest = max((cm.boundary_terms(a.domain, z.domain, plan.micro_batch, plan.dp)[0]
                   for a, z in zip(plan.stages, plan.stages[1:], strict=False)), default=0.0)
    if period <= compute * (1 + 1e-9):
        cause = "the slowest stage's compute"
    elif period <= busiest * (1 + 1e-9):
        cause = "the busiest link's transfer time"
    else:
        cause = f"a round trip over the WAN (the slowest stage computes {compute:.3f} s)"
    lines.append(f"1F1B period {period:.3f} s per micro-batch, set by {cause}")
    return lines


def heatmap(instance: Instance, plan: Plan, path: Path) -> None:
    """PNG of WAN GB per step between domains."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cm = cost_model(instance)
    m = instance.training.global_batch / (plan.dp * plan.micro_batch)
    traffic = np.zeros((instance.num_domains, instance.num_domains))
    for a, z in zip(plan.stages, plan.stages[1:], strict=False):
        if a.domain != z.domain:
            gb = float(cm.boundary_traffic_gb(a.domain, z.domain, plan.micro_batch, plan.dp, m))
            traffic[a.domain, z.domain] += gb / 2  # forward activations
            traffic[z.domain, a.domain] += gb / 2  # backward gradients
    figure, axis = plt.subplots(figsize=(6, 5))
    image = axis.imshow(traffic, cmap="viridis")
    axis.set_xticks(range(instance.num_domains), cm.domain_names, rotation=60, fontsize=7)
    axis.set_yticks(range(instance.num_domains), cm.domain_names, fontsize=7)
    axis.set_xlabel("to")
    axis.set_ylabel("from")
    figure.colorbar(image, label="WAN GB per step")
    axis.set_title(f"{instance.name}: cross-domain traffic")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp.png")
    figure.savefig(temporary)
    plt.close(figure)
    temporary.replace(path)


def parse_weights(text: str) -> np.ndarray:
    try:
        return check_weights([float(x) for x in text.split(",")])
    except ValueError:
        raise InputError(f"--weights: need three comma-separated numbers >= 0, not all 0; "
                         f"got {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m rl.decide",
                       description="A Hi-PPO plan for an instance and a preference.")
    parser.add_argument("instance", type=Path)
    parser.add_argument("--weights", required=True, help="w1,w2,w3 (efficiency, "
                        "utilisation, cost)")
    parser.add_argument("--samples", type=int, default=0)
    parser.add_argument("--polish", type=int, default=0,
                        help="rounds of local search on each plan (0: none)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT)
    parser.add_argument("--heatmap", type=Path, default=None, help="PNG of WAN traffic")
    parser.add_argument("--out", type=Path, default=None, help="write the plan JSON here")
    args = parser.parse_args(argv)
    return run_cli(lambda: _decide(args))


def _decide(args: argparse.Namespace) -> None:
    weights = parse_weights(args.weights)
    if args.samples < 0 or args.polish < 0:
        raise InputError("--samples and --polish must be >= 0")
    instance = Instance.load(args.instance)
    decision = Scheduler(args.checkpoint).decide(instance, weights, args.samples, args.seed,
                                                 args.polish)
    if args.out is not None:
        write_json_atomic(args.out, decision.plan.to_dict(instance))
    if args.heatmap is not None:
        heatmap(instance, decision.plan, args.heatmap)
    print(json.dumps(decision.to_dict(instance), indent=1))


if __name__ == "__main__":
    sys.exit(main())
