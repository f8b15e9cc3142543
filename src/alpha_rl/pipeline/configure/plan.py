"""The checked configs of one run: the `Plan` that `plan_run` (pipeline/configure/config.py)
parses from the composed config, and the typed configs of the run's own settings. Nothing here
parses: the parts, the memory estimate and the run's life read a plan;
pipeline/configure/config.py makes one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from alpha_rl.agent.config import AgentConfig, AlphaConfig
from alpha_rl.env import EnvConfig
from alpha_rl.hindsight import HerConfig
from alpha_rl.market.folds import Validation, WalkForward
from alpha_rl.pipeline.configure.objective import Objective
from alpha_rl.replay import ReplayConfig


@dataclass(frozen=True)
class ProbeConfig:
    """The probe set of real held-out transitions (conf/eval/*.yaml: eval.probe)."""

    size: int
    envs: int

    @property
    def steps(self) -> int:
        """Env steps the collection takes (every env contributes each step)."""
        return -(-self.size // self.envs)


@dataclass(frozen=True)
class EvalConfig:
    """Held-out evaluation (conf/eval/*.yaml)."""

    every: int
    first: tuple[int, ...]
    steps: int
    num_envs: int
    sharpe_window: int
    probe: ProbeConfig
    tearsheet: bool  # tearsheet.html / .png of the last evaluation at the end of each start
    backtest: bool | None  # the held-out span walked in calendar order at the end (None: auto)
    backtest_envs: int  # the envs that walk it side by side, each its own stretch of time

    def backtests(self, dated: bool) -> bool:
        """Whether the run ends with the calendar backtest: `eval.backtest.enabled`, or with
        `auto` whether the market has timestamps (`dated`)."""
        return dated if self.backtest is None else self.backtest

    def due(self, t: int, steps: int) -> bool:
        """Whether an evaluation runs after env step `t`: at the steps of `first`, every
        `every` steps, and at the end of the run."""
        return t == steps or t in self.first or (self.every > 0 and t % self.every == 0)


@dataclass(frozen=True)
class RunConfig:
    """The loop's own settings (conf/train.yaml, conf/checkpoint/, conf/audit/)."""

    seed: int
    steps: int
    log_every: int
    checkpoint_every: int
    checkpoint_replay: bool
    audit_every: int
    resume: Path | None


@dataclass(frozen=True)
class RewardConfig:
    """The reward layout and its weights (conf/reward/*.yaml); the scale is resolved later, once
    the market is built (pipeline/configure/scale.py)."""

    stride: int
    weights: tuple[float, ...]
    aux_align_weight: float | None  # w_6, stride 7 only
    opp_cost_kappa: float
    inventory_lambda: float
    drawdown_rho: float
    ema_alpha: float
    typical_range: tuple[float, float]
    fee_moves_max: float
    scale: float | None  # None: auto


@dataclass(frozen=True)
class BetaConfig:
    """The β aux-align reward (conf/beta/*.yaml): `sentinel` pays nothing (scale 0); with the
    controller `share`, w_aux_align follows c6's share of the reward (cuda/aux.cu)."""

    mode: str
    scale: float
    controller: str  # none | share
    gain: float = 0.0
    target_share: float = 0.0
    w_max: float = 0.0


@dataclass(frozen=True)
class BackendConfig:
    """Where the kernels run (conf/backend/*.yaml)."""

    name: str
    device: int
    cubin_dir: str | None
    graph: bool


@dataclass(frozen=True)
class Plan:
    """The checked configs of one run."""

    run: RunConfig
    env: EnvConfig
    replay: ReplayConfig
    agent: AgentConfig
    her: HerConfig | None
    eval: EvalConfig
    validation: Validation
    reward: RewardConfig
    beta: BetaConfig
    backend: BackendConfig
    alpha: AlphaConfig | None = None  # None: alpha='off'
    objective: Objective | None = None  # what the run returns to a search (conf/objective/)

    @property
    def learner_updates(self) -> int:
        """Learner updates the whole run makes: one per `updates_per_step` on every step from
        `agent.learn_start` on."""
        return learner_updates(self.run, self.agent)

    def resolved_params(self) -> dict[str, int]:
        """Values the run resolved from its config (MLflow params beside the config's)."""
        out = {"replay.beta_anneal_updates_resolved": self.replay.beta_anneal_updates}
        if isinstance(self.validation, WalkForward):
            out["validation.embargo_resolved"] = self.validation.embargo
        if self.her is not None and self.her.forward:
            out["her.closed_ring_resolved"] = self.her.closed_ring
        return out

    @property
    def max_push(self) -> int:
        """Rows of the largest push: B real transitions, or B x agent.n_step staged n-step ones
        (HER pushes at most B a launch)."""
        return self.env.num_envs * self.agent.n_step


def learner_updates(run: RunConfig, agent: AgentConfig) -> int:
    """Updates over steps 0..run.steps-1: those from agent.learn_start on, updates_per_step each."""
    return max(0, run.steps - agent.learn_start) * agent.updates_per_step
