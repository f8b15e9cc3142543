"""Every typed config of a run, parsed and checked before anything is allocated.

`plan_run(cfg)` turns the composed Hydra config into a `Plan`: the env, replay, agent and HER
configs of their modules plus the run's own settings (steps, log points, evaluation,
checkpoints, audit). Any bad value raises ConfigError naming the key, so a run fails at once,
before the market is built or the GPU is touched.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Mapping
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from alpha_rl import settings
from alpha_rl.agent.config import AgentConfig, AlphaConfig, check_alpha
from alpha_rl.backend.select import CHOICES as BACKENDS
from alpha_rl.env import EnvConfig
from alpha_rl.errors import ConfigError
from alpha_rl.hindsight import HerConfig
from alpha_rl.isv import IsvLayout
from alpha_rl.kernels import dqn
from alpha_rl.kernels.decl import RC_STRIDE
from alpha_rl.kernels.reward import RC_CORE, has_aux_align
from alpha_rl.market.folds import validation_config
from alpha_rl.pipeline.configure.keys import check_added_keys, task_groups, task_overrides
from alpha_rl.pipeline.configure.memory import check_memory
from alpha_rl.pipeline.configure.objective import Objective
from alpha_rl.pipeline.configure.parts import layout_from_plan
from alpha_rl.pipeline.configure.plan import (
    BackendConfig,
    BetaConfig,
    EvalConfig,
    Plan,
    ProbeConfig,
    RewardConfig,
    RunConfig,
    learner_updates,
)
from alpha_rl.pipeline.configure.scale import check_lot_mult, scale_setting
from alpha_rl.replay import ReplayConfig

log = logging.getLogger("alpha_rl")


def run_config(cfg: DictConfig) -> RunConfig:
    """The loop's settings, range-checked."""
    where = "conf/train.yaml"

    def at_least(key: str, least: int, what: str, file: str = where) -> int:
        return settings.integer(cfg, key, lambda v: v >= least, f">= {least} ({what})", file)

    resume = OmegaConf.select(cfg, "resume")
    if resume is not None and not isinstance(resume, str):
        raise ConfigError(f"resume={resume!r} must be the path of a run directory or null "
                          f"(see {where})")  # fmt: skip
    return RunConfig(
        seed=settings.integer(cfg, "seed", lambda v: 0 <= v < 2**63, "in 0..2^63-1", where),
        steps=at_least("steps", 1, "env steps per env"),
        log_every=at_least("log_every", 1, "env steps between log points"),
        checkpoint_every=at_least(
            "checkpoint.every", 0, "env steps; 0: only at the end", "conf/checkpoint/"
        ),
        checkpoint_replay=settings.flag(cfg, "checkpoint.replay", "conf/checkpoint/"),
        audit_every=at_least("audit.every", 0, "env steps; 0: never", "conf/audit/"),
        resume=Path(resume) if resume else None,
    )


def eval_config(cfg: DictConfig) -> EvalConfig:
    """Held-out evaluation settings, range-checked."""
    where = "conf/eval/"

    def whole(key: str, ok: Callable[[int], bool], what: str) -> int:
        return settings.integer(cfg, f"eval.{key}", ok, what, where)

    first = OmegaConf.select(cfg, "eval.first")
    if not OmegaConf.is_list(first) or not all(
        isinstance(x, int) and not isinstance(x, bool) for x in first
    ):
        raise ConfigError(f"eval.first={first!r} must be a list of env steps (see {where})")
    if not (all(x >= 1 for x in first) and list(first) == sorted(set(first))):
        raise ConfigError(f"eval.first={list(first)} must be ascending env steps >= 1 "
                          f"(see {where})")  # fmt: skip
    size = whole("probe.size", lambda v: 1 <= v <= dqn.MAX_BATCH,
                 f"in 1..{dqn.MAX_BATCH} (one TD block)")  # fmt: skip
    steps = whole("steps", lambda v: v >= 1, ">= 1 (env steps of one evaluation)")
    return EvalConfig(
        every=whole("every", lambda v: v >= 0, ">= 0 (env steps; 0: only at the end)"),
        first=tuple(first),
        steps=steps,
        num_envs=whole("num_envs", lambda v: v >= 1, ">= 1"),
        sharpe_window=whole(
            "sharpe_window", lambda v: 1 <= v <= steps, f"in 1..eval.steps={steps} (env steps)"
        ),
        probe=ProbeConfig(
            size, whole("probe.envs", lambda v: 1 <= v <= size, f"in 1..eval.probe.size={size}")
        ),
        tearsheet=settings.flag(cfg, "eval.tearsheet", where),
        backtest=settings.flag_or_auto(cfg, "eval.backtest.enabled", where),
        backtest_envs=whole("backtest.envs", lambda v: v >= 1, ">= 1 (1: one env walks it all)"),
    )


def reward_config(cfg: DictConfig) -> RewardConfig:
    """The reward settings, range-checked (stride: one the kernels are built for)."""
    where = "conf/reward/"

    def at_least_0(key: str) -> float:
        return settings.number(cfg, f"reward.{key}", lambda v: v >= 0, ">= 0", where)

    stride = settings.integer(cfg, "reward.stride", lambda v: v in RC_STRIDE.values,
                              f"in {list(RC_STRIDE.values)}", where)  # fmt: skip
    bounds = settings.numbers(cfg, "reward.typical_range", 2, lambda v: v > 0, "> 0", where)
    if not bounds[0] < bounds[1]:
        raise ConfigError(
            f"reward.typical_range={list(bounds)} must be [low, high] with 0 < low < high "
            f"(multiples of agent.huber_kappa; see {where})"
        )
    aux = None
    if has_aux_align(stride):
        aux = settings.number(cfg, "reward.aux_align_weight", math.isfinite, "(finite)", where)
    alpha = settings.number(cfg, "reward.ema_alpha", lambda v: 0 < v <= 1, "in (0, 1]", where)
    fees = settings.number(cfg, "reward.fee_moves_max", lambda v: v > 0, "> 0 (typical moves)",
                           where)  # fmt: skip
    return RewardConfig(
        stride=stride,
        weights=settings.numbers(cfg, "reward.weights", RC_CORE, math.isfinite, "finite", where),
        aux_align_weight=aux,
        opp_cost_kappa=at_least_0("opp_cost_kappa"),
        inventory_lambda=at_least_0("inventory_lambda"),
        drawdown_rho=at_least_0("drawdown_rho"),
        ema_alpha=alpha,
        typical_range=(bounds[0], bounds[1]),
        fee_moves_max=fees,
        scale=scale_setting(cfg),
    )


def beta_config(cfg: DictConfig) -> BetaConfig:
    """β's mode and scale: sentinel pays exactly nothing, active a positive fraction."""
    where = "conf/beta/"
    mode = settings.choice(cfg, "beta.mode", ("sentinel", "active"), where)
    if mode == "sentinel":
        ok, what = (lambda v: v == 0), "= 0 with beta=sentinel (beta=active pays β)"
    else:
        ok, what = (lambda v: v > 0), "> 0 with beta=active (a fraction of the trade's PnL)"
    scale = settings.number(cfg, "beta.scale", ok, what, where)
    controller = settings.choice(cfg, "beta.controller", ("none", "share"), where)
    if controller == "none":
        return BetaConfig(mode, scale, controller)
    if mode != "active":
        raise ConfigError(
            "beta.controller=share steers the β reward's weight, so it needs beta=active "
            f"(beta.mode={mode}); use beta=active_controller (see {where})"
        )

    def positive(key: str, ok: Callable[[float], bool], what: str) -> float:
        return settings.number(cfg, key, ok, what, where)

    return BetaConfig(
        mode, scale, controller,
        gain=positive("beta.gain", lambda v: v > 0, "> 0 (weight per step per unit of share)"),
        target_share=positive("beta.target_share", lambda v: 0 < v < 1, "in (0, 1)"),
        w_max=positive("beta.w_max", lambda v: v > 0, "> 0 (w_aux_align's ceiling)"),
    )  # fmt: skip


def alpha_config(cfg: DictConfig) -> AlphaConfig | None:
    """α's settings (conf/alpha/on.yaml), None when alpha='off'."""
    where = "conf/alpha/"
    mode = settings.choice(cfg, "alpha.mode", ("off", "on"), where)
    if mode == "off":
        return None
    bound = settings.number(cfg, "alpha.bound", lambda v: v > 0, "> 0 (reward units)", where)
    return AlphaConfig(
        lr=settings.number(cfg, "alpha.lr", lambda v: v >= 0, ">= 0 (w_α's Adam learning rate)",
                           where),
        bound=bound,
        init=settings.number(cfg, "alpha.init", lambda v: abs(v) <= bound,
                             f"in [-alpha.bound, alpha.bound] = [-{bound:g}, {bound:g}]", where),
    )  # fmt: skip


def backend_config(cfg: DictConfig) -> BackendConfig:
    """The backend's choice and settings."""
    where = "conf/backend/"
    cubin_dir = OmegaConf.select(cfg, "backend.cubin_dir")
    if cubin_dir is not None and not isinstance(cubin_dir, str):
        raise ConfigError(f"backend.cubin_dir={cubin_dir!r} must be a path or null (see {where})")
    device = settings.integer(cfg, "backend.device", lambda v: v >= 0, ">= 0 (a CUDA ordinal)",
                              where)  # fmt: skip
    return BackendConfig(
        name=settings.choice(cfg, "backend.name", BACKENDS, where),
        device=device,
        cubin_dir=cubin_dir,
        graph=settings.flag(cfg, "backend.graph", where),
    )


def plan_run(cfg: DictConfig) -> Plan:
    """Parse and check every section; raises ConfigError naming the first bad key. A `+key`
    that nothing reads, money that overflows float32, a learner that would never update and a
    run the machine's memory cannot hold are refused too."""
    check_added_keys(task_overrides(cfg), task_groups(cfg))
    run, agent, env = run_config(cfg), AgentConfig.from_cfg(cfg.agent), EnvConfig.from_cfg(cfg.env)
    check_lot_mult(env)
    objective, evaluation = Objective.from_cfg(cfg), eval_config(cfg)
    if objective.baseline is not None:  # the margin is the calendar backtest's
        if evaluation.backtest is False:
            raise ConfigError("objective=margin is measured on the calendar backtest: drop "
                              "eval.backtest.enabled=false (or choose another "
                              "objective=)")  # fmt: skip
        evaluation = dataclasses.replace(evaluation, backtest=True)
    plan = Plan(
        run=run,
        env=env,
        replay=ReplayConfig.from_cfg(cfg.replay, learner_updates(run, agent)),
        agent=agent,
        her=HerConfig.from_cfg(cfg),
        eval=evaluation,
        validation=validation_config(cfg, max(env.perception.horizons)),
        reward=reward_config(cfg),
        beta=beta_config(cfg),
        backend=backend_config(cfg),
        alpha=alpha_config(cfg),
        objective=objective,
    )
    check_plan(plan)
    check_memory(plan, settings.integer(cfg, "isv.size", lambda v: v >= 1, ">= 1", "conf/isv/"))
    return plan


def with_market(plan: Plan, scaled: DictConfig) -> Plan:
    """`plan` with what the run resolves from its market (reward.scale=auto) taken from
    `scaled`, the config market_and_config returned: the plan a session's ISV is filled from."""
    return dataclasses.replace(plan, reward=reward_config(scaled))


def layout_from_config(cfg: DictConfig, choices: Mapping[str, str] | None = None) -> IsvLayout:
    """The validated ISV layout of a composed config whose reward.scale is a number: its slots'
    places from the config groups, their values from its plan (`plan_run`)."""
    return layout_from_plan(cfg, choices, plan_run(cfg))


def check_plan(plan: Plan) -> None:
    """The checks between sections (ConfigError)."""
    agent, run = plan.agent, plan.run
    check_alpha(agent, plan.alpha)
    if agent.learn_start >= run.steps:  # steps: the whole run's, a resumed run's included
        raise ConfigError(
            f"agent.learn_start={agent.learn_start} is not below steps={run.steps}: the learner "
            "would never update and the run would end FINISHED untrained; set "
            f"agent.learn_start < {run.steps} or raise steps (see conf/agent/)"
        )
    her, B = plan.her, plan.env.num_envs
    if her is not None and her.forward and her.closed_ring < B:  # Hindsight's, before any work
        raise ConfigError(
            f"her.closed_ring={her.closed_ring} is smaller than env.num_envs={B}: the forward "
            "ring must hold one step's closes; raise her.closed_ring to a power of two >= "
            f"{1 << (B - 1).bit_length()} (see conf/her/)"
        )
    if plan.max_push > plan.replay.capacity:
        raise ConfigError(
            f"replay.capacity_log2={plan.replay.capacity_log2} holds {plan.replay.capacity} "
            f"transitions, fewer than one step pushes ({plan.max_push}: env.num_envs x "
            "agent.n_step); raise replay.capacity_log2"
        )


def keep_beta_anneal(plan: Plan, cfg: DictConfig, saved_yaml: str) -> Plan:
    """A resumed run keeps the β anneal its first start resolved (from that start's `steps`):
    a run extended with more steps holds β at 1 after its first end, never steps it back."""
    if cfg.replay.beta_anneal_updates is not None:
        return plan
    saved = yaml.safe_load(saved_yaml) or {}
    first = dataclasses.replace(plan.run, steps=int(saved.get("steps", plan.run.steps)))
    replay = ReplayConfig.from_cfg(cfg.replay, learner_updates(first, plan.agent))
    if replay != plan.replay:
        log.info("resume: PER's beta keeps the anneal over %d updates of the run's first %d "
                 "steps (beta stays 1 after it); set replay.beta_anneal_updates to choose",
                 replay.beta_anneal_updates, first.steps)  # fmt: skip
    return dataclasses.replace(plan, replay=replay)


def log_beta_anneal(cfg: DictConfig, plan: Plan) -> None:
    """Say over how many updates PER's β reaches 1, and where that number came from."""
    rp, source = plan.replay, "replay.beta_anneal_updates"
    if cfg.replay.beta_anneal_updates is None:
        source = f"the run's own {plan.learner_updates} learner updates"
    log.info("PER importance sampling: beta %.2f -> 1 over %d updates (%s)", rp.beta0,
             rp.beta_anneal_updates, source)  # fmt: skip
