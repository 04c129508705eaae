"""Hi-PPO training: hierarchical PPO with a Lagrangian, readable top to bottom (CleanRL style).

    python -m rl.train [--config rl/configs/hi_ppo.yaml] --out CHECKPOINT [--resume]
                       [--total-steps N]

One iteration collects ``num_steps`` decisions from :class:`rl.env.PlanEnv` on generated
tasks (:mod:`rl.tasks`), computes GAE advantages and runs ``update_epochs`` epochs of clipped
PPO over minibatches. The hierarchy follows the seeds: the lower level (OPTION and SPLIT
heads, its value head) is updated every iteration, the upper level (the graph encoder, the
PAIR, DOMAIN and LAYERS heads, its value head) every ``upper_every`` iterations, each level
on the decisions of its own phases. The trainer owns the Lagrange multipliers of the soft
constraints (:class:`rl.env.Multipliers`, one per constraint and budget bucket) and passes
them to every episode; after each iteration each rises by ``lagrange_lr`` times the mean
excess of its bucket's finished episodes (dual ascent; never below 0).

Determinism and resuming: every iteration starts a fresh episode with a seed derived from
the run's seed and the iteration number, and reseeds the action sampler the same way, so an
iteration is a function of the weights it starts from. A checkpoint holds the weights, both
optimizers, the multipliers, the iteration and the learning curve; ``--resume`` continues
from it and gives the same result as an uninterrupted run.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from formulation.outputs import output_path, write_atomic, write_json
from formulation.schema import (
    CliParser,
    InputError,
    check_ranges,
    integer_arg,
    read_yaml,
    run_cli,
)
from rl.env import (
    ACTIONS,
    BUCKETS,
    MAX_DOMAINS,
    OPTION,
    SOFT_CONSTRAINTS,
    Multipliers,
    PlanEnv,
)
from rl.features import CONTEXT, EDGE, NODE
from rl.imitation import ImitationSettings, clone, demonstrations
from rl.networks import OBS_KEYS, HiPPOPolicy, as_tensors
from rl.tasks import TaskSampler, TaskSettings
from solvers.front import command_line, versions

DEFAULT_CONFIG = Path(__file__).resolve().parent / "configs" / "hi_ppo.yaml"
LOWER_MODULES = ("option_head", "split_head", "lower_value")


# (least, most) of every numeric field of HiPPOConfig: integers where both are integers
CONFIG_RANGES = {
    "learning_rate": (1e-12, 1.0), "gamma": (0.0, 1.0), "gae_lambda": (0.0, 1.0),
    "clip_coef": (0.0, 10.0), "ent_coef": (0.0, 10.0), "vf_coef": (0.0, 100.0),
    "max_grad_norm": (1e-12, 1e6), "target_kl": (0.0, 10.0), "lagrange_lr": (0.0, 10.0),
    "num_steps": (1, 10_000_000), "update_epochs": (1, 1000), "minibatch_size": (1, 10_000_000),
    "upper_every": (1, 1000), "total_steps": (1, 10_000_000_000), "hidden": (1, 4096),
    "eval_every": (1, 1_000_000), "eval_tasks": (1, 100_000),
    "checkpoint_every": (1, 1_000_000), "seed": (0, 2 ** 32 - 1)}


@dataclass
class HiPPOConfig:
    """Hyper-parameters of one training run (values: seeds/002 section 5)."""

    learning_rate: float = 3e-4
    """Adam step size of both levels."""
    gamma: float = 0.99
    """Discount per decision."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    clip_coef: float = 0.2
    """PPO ratio clip."""
    ent_coef: float = 0.01
    """Entropy bonus weight."""
    vf_coef: float = 0.5
    """Value loss weight."""
    max_grad_norm: float = 0.5
    """Global gradient norm clip."""
    target_kl: float = 0.02
    """An iteration's epochs stop early once the approximate KL exceeds this."""
    num_steps: int = 2048
    """Decisions collected per iteration."""
    update_epochs: int = 10
    """PPO epochs per iteration."""
    minibatch_size: int = 256
    """Decisions per minibatch."""
    upper_every: int = 2
    """The upper level is updated every this many iterations, the lower level every one."""
    total_steps: int = 200_000
    """Decisions in the whole run."""
    hidden: int = 128
    """Width of the GraphSAGE encoder and the heads."""
    lagrange_lr: float = 0.05
    """Dual ascent step of the soft constraints' multipliers."""
    eval_every: int = 5
    """Iterations between evaluations of the greedy policy on the validation tasks."""
    eval_tasks: int = 32
    """Validation tasks (from a pool drawn with another seed than the training pool)."""
    checkpoint_every: int = 5
    """Iterations between checkpoints (and one at the end)."""
    seed: int = 0
    """Seed of the run: weights, episodes and sampling."""
    tasks: dict = field(default_factory=dict)
    """Fields of :class:`rl.tasks.TaskSettings`."""
    imitation: dict | None = None
    """Fields of :class:`rl.imitation.ImitationSettings`: clone demonstrations before PPO
    (None: start PPO from random weights)."""

    def __post_init__(self):
        check_ranges(self, CONFIG_RANGES)
        if self.minibatch_size > self.num_steps:
            raise InputError(f"minibatch_size must be <= num_steps ({self.num_steps}), got "
                             f"{self.minibatch_size}")
        for name in ("tasks", "imitation"):
            value = getattr(self, name)
            if not isinstance(value, dict) and not (name == "imitation" and value is None):
                raise InputError(f"{name} must be a mapping of fields")

    @staticmethod
    def load(path: str | Path) -> HiPPOConfig:
        document = read_yaml(path, "config")
        if document is None:  # an empty file is more likely a mistake than every default
            raise InputError(f"config {str(path)!r} is empty (write {{}} for every default)")
        if not isinstance(document, dict):
            raise InputError(f"config {str(path)!r}: must be a mapping of fields")
        sections = {name: document.get(name) for name in ("tasks", "imitation")}
        for fields, kind, spell in ((document, HiPPOConfig, repr),
                                    (sections["tasks"], TaskSettings, "tasks.{}".format),
                                    (sections["imitation"], ImitationSettings,
                                     "imitation.{}".format)):
            if not isinstance(fields, dict):  # not a mapping: HiPPOConfig says so below
                continue
            unknown = sorted(set(fields) - {f.name for f in dataclasses.fields(kind)})
            if unknown:
                raise InputError(f"config {str(path)!r}: unknown field {spell(unknown[0])}")
        try:
            config = HiPPOConfig(**document)
            TaskSettings(**config.tasks)
            imitation_settings(config.imitation)
            return config
        except (TypeError, ValueError) as err:  # InputError included: a field out of range
            raise InputError(f"config {str(path)!r}: {err}") from None


def imitation_settings(fields: dict | None) -> ImitationSettings | None:
    if fields is None:
        return None
    fields = dict(fields)
    if "experts" in fields:
        fields["experts"] = tuple(fields["experts"])
    return ImitationSettings(**fields)


def make_policy(config: HiPPOConfig) -> HiPPOPolicy:
    return HiPPOPolicy(NODE.size, EDGE.size, CONTEXT.size, ACTIONS, MAX_DOMAINS,
                       hidden=config.hidden)


def level_parameters(policy: HiPPOPolicy) -> tuple[list, list]:
    """(upper, lower) parameters: the encoder belongs to the upper level."""
    lower = [p for name in LOWER_MODULES for p in getattr(policy, name).parameters()]
    ids = {id(p) for p in lower}
    return [p for p in policy.parameters() if id(p) not in ids], lower


@dataclass
class Rollout:
    """One iteration's decisions, and the episodes that finished in it."""

    observations: dict[str, np.ndarray]
    actions: np.ndarray
    log_probs: np.ndarray
    values: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray  # the episode ended after this decision
    last_value: float
    episodes: list[dict]


def collect(env: PlanEnv, policy: HiPPOPolicy, steps: int, seed: int,
            multipliers: Multipliers) -> Rollout:
    """``steps`` decisions of the sampling policy, starting a fresh episode seeded ``seed``,
    every episode under the trainer's current ``multipliers``."""
    generator = torch.Generator().manual_seed(seed)
    penalties = {"multipliers": multipliers}
    observation, _ = env.reset(seed=seed, options=penalties)
    store = {key: [] for key in OBS_KEYS}
    actions, log_probs, values, rewards, dones, episodes = [], [], [], [], [], []
    total = 0.0
    for _ in range(steps):
        for key in OBS_KEYS:
            store[key].append(np.asarray(observation[key]))
        with torch.no_grad():
            action, log_prob, _, value = policy.act(as_tensors(observation),
                                                    generator=generator)
        observation, reward, terminated, truncated, info = env.step(int(action))
        total += reward
        actions.append(int(action))
        log_probs.append(float(log_prob))
        values.append(float(value))
        rewards.append(reward)
        done = terminated or truncated
        dones.append(done)
        if done:
            episodes.append({"return": total, "feasible": info.get("feasible", False),
                             "constraints": info.get("constraints",
                                                     [0.0] * len(SOFT_CONSTRAINTS)),
                             "bucket": info.get("bucket", 0)})
            total = 0.0
            observation, _ = env.reset(options=penalties)
    with torch.no_grad():
        _, _, _, last_value = policy.act(as_tensors(observation), generator=generator)
    return Rollout({key: np.stack(values_) for key, values_ in store.items()},
                   np.array(actions), np.array(log_probs), np.array(values),
                   np.array(rewards), np.array(dones), float(last_value), episodes)


def advantages(rollout: Rollout, gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """GAE advantages and returns; an ended episode does not bootstrap."""
    count = len(rollout.rewards)
    advantage = np.zeros(count)
    running = 0.0
    for t in reversed(range(count)):
        next_value = rollout.last_value if t == count - 1 else rollout.values[t + 1]
        alive = 1.0 - rollout.dones[t]
        delta = rollout.rewards[t] + gamma * next_value * alive - rollout.values[t]
        running = delta + gamma * lam * alive * running
        advantage[t] = running
    return advantage, advantage + rollout.values


def update(policy: HiPPOPolicy, optimizers: tuple, rollout: Rollout, config: HiPPOConfig,
           upper_turn: bool, generator: torch.Generator) -> dict[str, float]:
    """PPO epochs on the iteration's decisions of the levels whose turn it is."""
    advantage, returns = advantages(rollout, config.gamma, config.gae_lambda)
    observations = as_tensors(rollout.observations)
    actions = torch.as_tensor(rollout.actions)
    old_log_probs = torch.as_tensor(rollout.log_probs, dtype=torch.float32)
    advantage_t = torch.as_tensor(advantage, dtype=torch.float32)
    returns_t = torch.as_tensor(returns, dtype=torch.float32)
    lower = observations["phase"] >= OPTION
    trained = lower | upper_turn
    index = torch.nonzero(trained).squeeze(-1)
    stats = {"approx_kl": 0.0, "policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0}
    if not len(index):
        return stats
    # (upper, lower): the upper optimizer steps only on its turn; on the lower level's own
    # turns the encoder's gradients from lower-phase losses are discarded
    stepping = optimizers if upper_turn else optimizers[1:]
    params = [p for group in stepping for g in group.param_groups for p in g["params"]]
    for _ in range(config.update_epochs):
        order = index[torch.randperm(len(index), generator=generator)]
        for start in range(0, len(order), config.minibatch_size):
            batch = order[start:start + config.minibatch_size]
            new_log_prob, entropy, value = policy.evaluate_actions(
                {key: tensor[batch] for key, tensor in observations.items()}, actions[batch])
            ratio = (new_log_prob - old_log_probs[batch]).exp()
            adv = advantage_t[batch]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8) if len(batch) > 1 else adv
            policy_loss = torch.max(-adv * ratio, -adv * ratio.clamp(
                1 - config.clip_coef, 1 + config.clip_coef)).mean()
            value_loss = 0.5 * (value - returns_t[batch]).pow(2).mean()
            loss = policy_loss - config.ent_coef * entropy.mean() + config.vf_coef * value_loss
            for optimizer in optimizers:
                optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            for optimizer in stepping:
                optimizer.step()
            with torch.no_grad():
                log_ratio = new_log_prob - old_log_probs[batch]
                stats["approx_kl"] = float(((ratio - 1) - log_ratio).mean())
            stats.update(policy_loss=policy_loss.item(), value_loss=value_loss.item(),
                         entropy=entropy.mean().item())
        if stats["approx_kl"] > config.target_kl:
            break
    return stats


def greedy_outcomes(policy: HiPPOPolicy, env: PlanEnv, tasks: list,
                    multipliers: Multipliers | None = None) -> list[dict]:
    """The greedy policy's plan on each task: its reward (the objectives' reward, no
    penalty), its value under ``multipliers`` (reward less the soft constraints'
    penalties; none: no penalty), whether it exceeds a soft constraint, its budget bucket
    and whether it is feasible."""
    multipliers = Multipliers() if multipliers is None else multipliers
    outcomes = []
    for task in tasks:
        observation, _ = env.reset(options={"instance": task.instance,
                                            "weights": task.weights,
                                            "budgets": task.budgets,
                                            "multipliers": multipliers})
        while True:
            with torch.no_grad():
                action, *_ = policy.act(as_tensors(observation), deterministic=True)
            observation, value, terminated, truncated, info = env.step(int(action))
            if terminated or truncated:
                outcomes.append({
                    "reward": float(info.get("reward_terms", value)), "lagrangian": value,
                    "violates": bool(np.any(np.asarray(info.get("constraints", 0.0)) > 0)),
                    "bucket": int(info.get("bucket", 0)),
                    "feasible": bool(info.get("feasible", False))})
                break
    return outcomes


def evaluate_greedy(policy: HiPPOPolicy, env: PlanEnv, tasks: list,
                    multipliers: Multipliers) -> dict[str, float]:
    """The greedy policy on fixed tasks: mean reward (without penalties, so that runs and
    iterations compare: the multipliers change as training goes), the share of plans over
    a soft constraint, the mean Lagrangian under the trainer's current ``multipliers`` (what
    PPO maximises) and the feasible share."""
    outcomes = greedy_outcomes(policy, env, tasks, multipliers)
    return {"eval_reward": float(np.mean([o["reward"] for o in outcomes])),
            "eval_violation": float(np.mean([o["violates"] for o in outcomes])),
            "eval_lagrangian": float(np.mean([o["lagrangian"] for o in outcomes])),
            "eval_feasible": float(np.mean([o["feasible"] for o in outcomes]))}


def validation_tasks(config: HiPPOConfig, env: PlanEnv, count: int) -> list:
    """The first ``count`` validation tasks of a run of ``config``: drawn from a pool seeded
    apart from the training pool (``tasks.seed + 1``), the draws seeded ``seed + 1``; the
    training's own evaluation uses the first ``eval_tasks`` of them."""
    settings = TaskSettings(**config.tasks)
    pool = TaskSampler(dataclasses.replace(settings, seed=settings.seed + 1))
    rng = np.random.default_rng(config.seed + 1)
    return [env.draw(pool, rng) for _ in range(count)]


def save_checkpoint(path: Path, payload: dict) -> None:
    """Write to a temporary file, then rename: never half a checkpoint."""
    write_atomic(path, lambda temporary: torch.save(payload, temporary))


def train(config: HiPPOConfig, out: Path, resume: bool = False,
          progress: bool = True) -> dict:
    """Train (or continue) a run; returns the final checkpoint's payload."""
    torch.manual_seed(config.seed)
    torch.set_num_threads(1)  # small networks: threads cost more than they give
    policy = make_policy(config)
    upper, lower = level_parameters(policy)
    optimizers = (torch.optim.Adam(upper, lr=config.learning_rate, eps=1e-5),
                  torch.optim.Adam(lower, lr=config.learning_rate, eps=1e-5))
    settings = TaskSettings(**config.tasks)
    env = PlanEnv(tasks=TaskSampler(settings))
    eval_tasks = validation_tasks(config, env, config.eval_tasks)

    start, curve, wall, cloned = 0, [], 0.0, None
    multipliers = Multipliers()  # the trainer's: raised by dual ascent, passed to the env
    if resume:
        payload = resumable(config, out)
        policy.load_state_dict(payload["policy"].state_dict())
        try:
            for optimizer, state in zip(optimizers, payload["optimizers"], strict=True):
                optimizer.load_state_dict(state)
        except (ValueError, KeyError, TypeError, RuntimeError):
            raise InputError(f"--resume: checkpoint {str(out)!r}: its optimizer states do "
                             "not fit the policy") from None
        multipliers = Multipliers(payload["multipliers"])
        start, curve, wall = payload["iteration"], payload["curve"], payload["wall_time_s"]
        cloned = payload.get("imitation")
    began = time.perf_counter() - wall
    imitation = imitation_settings(config.imitation)
    if imitation is not None and start == 0:  # the warm start, before iteration 0
        demos = demonstrations(env.tasks.instances, imitation, settings.bandwidth_swing,
                               config.gamma, config.seed, progress)
        cloned = clone(policy, demos, imitation, config.vf_coef, config.max_grad_norm,
                       config.seed, _clone_progress(progress, imitation.epochs))
        cloned.update(evaluate_greedy(policy, env, eval_tasks, multipliers),
                      wall_time_s=round(time.perf_counter() - began, 2))
        # the cloned policy alone, to measure what PPO adds (rl.decide loads it as is)
        save_checkpoint(cloned_path(out), {
            "config": dataclasses.asdict(config), "policy": policy.state_dict(),
            "multipliers": multipliers.values.tolist(), "iteration": 0, "curve": [],
            "wall_time_s": cloned["wall_time_s"], "imitation": cloned})
    iterations = max(1, config.total_steps // config.num_steps)
    bar = _progress(progress, iterations, start)
    payload: dict = {}
    for iteration in range(start, iterations):
        rollout = collect(env, policy, config.num_steps, config.seed * 1_000_003 + iteration,
                          multipliers)
        generator = torch.Generator().manual_seed(config.seed * 7_919 + iteration)
        upper_turn = iteration % config.upper_every == 0
        stats = update(policy, optimizers, rollout, config, upper_turn, generator)
        multipliers.ascend(rollout.episodes, config.lagrange_lr)
        row = {"iteration": iteration + 1, "steps": (iteration + 1) * config.num_steps,
               "episodes": len(rollout.episodes),
               "mean_return": float(np.mean([e["return"] for e in rollout.episodes]))
               if rollout.episodes else float("nan"),
               "feasible": float(np.mean([e["feasible"] for e in rollout.episodes]))
               if rollout.episodes else float("nan"),
               "upper_updated": upper_turn, **stats,
               **{f"lambda_{n}_{b}": float(multipliers.values[c, b])
                  for c, n in enumerate(SOFT_CONSTRAINTS)
                  for b in range(multipliers.values.shape[1])}}
        last = iteration + 1 == iterations
        if (iteration + 1) % config.eval_every == 0 or last:
            row.update(evaluate_greedy(policy, env, eval_tasks, multipliers))
        row["wall_time_s"] = round(time.perf_counter() - began, 2)
        curve.append(row)
        if (iteration + 1) % config.checkpoint_every == 0 or last:
            payload = {"config": dataclasses.asdict(config), "policy": policy.state_dict(),
                       "optimizers": [o.state_dict() for o in optimizers],
                       "multipliers": multipliers.values.tolist(), "iteration": iteration + 1,
                       "curve": curve, "wall_time_s": row["wall_time_s"],
                       "imitation": cloned}
            save_checkpoint(out, payload)
        bar(row)
    return payload


def resumable(config: HiPPOConfig, out: Path) -> dict:
    """The checkpoint at ``out`` that a run of ``config`` continues, checked: one trained
    with the same configuration (a run continues as it began, only longer)."""
    payload = load_checkpoint(out, resume=True)
    trained = dataclasses.replace(payload["config"], total_steps=config.total_steps)
    if trained != config:
        differ = next(k for k, v in dataclasses.asdict(config).items()
                      if dataclasses.asdict(trained)[k] != v)
        raise InputError(f"--resume: checkpoint {str(out)!r} was trained with another "
                         f"config ({differ} differs)")
    return payload


def cloned_path(out: Path) -> Path:
    """Where the policy after behaviour cloning, before PPO, is saved beside ``out``."""
    return out.with_name(f"{out.stem}.cloned{out.suffix}")


def load_checkpoint(path: str | Path, resume: bool = False) -> dict:
    """A checkpoint's payload, checked (any fault is one :class:`InputError` naming the
    file): its configuration valid, its policy weights finite tensors of the shapes that
    configuration builds, its multipliers finite numbers >= 0 (one per soft constraint and
    bucket); with ``resume``, also what training continues from (optimizer states,
    iteration, learning curve, wall time)."""
    path = Path(path)
    where = f"checkpoint {str(path)!r}"
    if not path.is_file():
        raise InputError(f"{where}: no such file")
    try:
        payload = torch.load(path, weights_only=True)
    except Exception as err:  # torch raises many kinds on a corrupt or foreign file
        raise InputError(f"{where}: not a Hi-PPO checkpoint ({type(err).__name__})") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("config"), dict) \
            or not isinstance(payload.get("policy"), dict):
        raise InputError(f"{where}: not a Hi-PPO checkpoint (no config and policy)")
    try:
        config = HiPPOConfig(**payload["config"])
    except (InputError, TypeError, ValueError) as err:
        raise InputError(f"{where}: config: {err}") from None
    policy = make_policy(config)
    try:
        policy.load_state_dict(payload["policy"])
    except (RuntimeError, TypeError, KeyError, AttributeError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise InputError(f"{where}: its weights do not fit its config ({reason})") from None
    broken = next((name for name, tensor in policy.state_dict().items()
                   if tensor.is_floating_point() and not torch.isfinite(tensor).all()), None)
    if broken is not None:  # a diverged run: never scored as a policy
        raise InputError(f"{where}: weights {broken} are not finite")
    try:
        multipliers = np.array(payload.get("multipliers", 0.0), dtype=float) \
            * np.ones((len(SOFT_CONSTRAINTS), BUCKETS))
    except (TypeError, ValueError):
        raise InputError(f"{where}: multipliers must be numbers, one per soft constraint "
                         f"and bucket ({len(SOFT_CONSTRAINTS)} x {BUCKETS})") from None
    if not (np.isfinite(multipliers).all() and (multipliers >= 0).all()):
        raise InputError(f"{where}: multipliers must be finite numbers >= 0")
    checked = {**payload, "config": config, "policy": policy, "multipliers": multipliers}
    if resume:
        iteration, wall = payload.get("iteration"), payload.get("wall_time_s")
        if not (isinstance(payload.get("optimizers"), list)
                and len(payload["optimizers"]) == 2
                and isinstance(payload.get("curve"), list)
                and isinstance(iteration, int) and not isinstance(iteration, bool)
                and iteration >= 0 and isinstance(wall, int | float)
                and math.isfinite(wall) and wall >= 0):
            raise InputError(f"{where}: not a checkpoint training can continue from (it "
                             "needs optimizers, iteration, curve and wall_time_s)")
    return checked


def _progress(enabled: bool, total: int, done: int):
    if not enabled:
        return lambda row: None
    from tqdm import tqdm

    bar = tqdm(total=total, initial=done, unit="it", file=sys.stderr)

    def advance(row: dict) -> None:
        bar.set_postfix(ret=f"{row['mean_return']:.3f}", kl=f"{row['approx_kl']:.3f}",
                        **({"eval": f"{row['eval_reward']:.3f}"} if "eval_reward" in row
                           else {}))
        bar.update(1)
        if row["iteration"] == total:
            bar.close()
    return advance


def _clone_progress(enabled: bool, epochs: int):
    if not enabled:
        return None
    from tqdm import tqdm

    bar = tqdm(total=epochs, unit="epoch", desc="cloning", file=sys.stderr)

    def advance(stats: dict) -> None:
        bar.set_postfix(loss=f"{stats['clone_loss']:.3f}")
        bar.update(1)
        if stats["epoch"] == epochs:
            bar.close()
    return advance


def main(argv: list[str] | None = None) -> int:
    parser = CliParser(prog="python -m rl.train", description="Train the Hi-PPO scheduler.")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG,
                        help="training configuration YAML; its `seed` is the run's one seed "
                             "(default rl/configs/hi_ppo.yaml)")
    parser.add_argument("--out", type=str, required=True, help="checkpoint to write")
    parser.add_argument("--resume", action="store_true", help="continue from --out")
    parser.add_argument("--total-steps", type=integer_arg(1, 10_000_000_000), default=None,
                        help="PPO decisions in all (default: the configuration's)")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    args = parser.parse_args(argv)
    return run_cli(lambda: _train(args))


def _train(args: argparse.Namespace) -> None:
    # the checkpoint and its provenance beside it (OUT.json), checked before any work
    args.out = output_path(args.out, inputs=[args.config], stdout=False)
    if args.out.suffix == ".json":
        raise InputError(f"--out {str(args.out)!r}: a checkpoint, not .json (its provenance "
                         "is written beside it as OUT.json)")
    output_path(args.out.with_suffix(".json"), inputs=[args.config], flag="--out (.json)")
    config = HiPPOConfig.load(args.config)
    if args.total_steps is not None:  # bounded by its flag's type
        config.total_steps = args.total_steps
    if args.resume:  # checked before the training pool is built
        resumable(config, args.out)
    payload = train(config, args.out, args.resume, not args.quiet)
    last = payload["curve"][-1]
    # provenance and learning curve beside the checkpoint, readable without torch
    write_json(args.out.with_suffix(".json"), {
        "command": command_line("rl.train"), "versions": {**versions(),
                                                           "torch": torch.__version__},
        "config": dataclasses.asdict(config), "iterations": payload["iteration"],
        "steps": last["steps"], "wall_time_s": last["wall_time_s"],
        "checkpoint": args.out.name, "imitation": payload.get("imitation"),
        "curve": payload["curve"]})
    print(f"{last['steps']} steps, {last['wall_time_s']} s, greedy validation reward "
          f"{last.get('eval_reward', float('nan')):.4f} -> {args.out}")


if __name__ == "__main__":
    sys.exit(main())
