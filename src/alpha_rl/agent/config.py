"""The learner's typed settings: `AgentConfig` (conf/agent/*.yaml), read and range-checked by
`AgentConfig.from_cfg`, and `AlphaConfig` (conf/alpha/on.yaml, read by the run's plan)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from omegaconf import DictConfig, OmegaConf

from alpha_rl import settings
from alpha_rl.errors import ConfigError
from alpha_rl.kernels import c51

EXACT_IN_F32 = 2**24  # whole numbers up to this are exact in the ISV's float32
WHERE = "conf/agent/"  # the files an error about an agent.* key points to
# agent.precision: "fp32" (every product in float32 on the CUDA cores, each sum in k order) or
# "tf32" (the network's forward and input-gradient products on the tensor cores with TF32
# operands, float32 sums; the Q head and the weight and bias gradients stay float32)
PRECISIONS = ("fp32", "tf32")


class _AgentReader:
    """The readers of one composed `agent` section; each error names the key, its value, the
    range and conf/agent/."""

    def __init__(self, node: DictConfig) -> None:
        self.agent = settings.section(node, "agent")

    def num(self, key: str, ok: Callable[[float], bool], what: str) -> float:
        return settings.number(self.agent, f"agent.{key}", ok, what, WHERE)

    def whole(self, key: str, least: int, unit: str) -> int:
        return settings.integer(self.agent, f"agent.{key}", lambda v: v >= least,
                                f">= {least} ({unit})", WHERE)  # fmt: skip

    def flag(self, key: str) -> bool:
        return settings.flag(self.agent, f"agent.{key}", WHERE)

    def hidden(self) -> tuple[int, ...]:
        """agent.hidden: the hidden layers' widths, one or more whole numbers >= 1."""
        widths = OmegaConf.select(self.agent, "agent.hidden")
        hidden = OmegaConf.to_container(widths) if OmegaConf.is_list(widths) else widths
        ok = isinstance(hidden, list) and len(hidden) >= 1
        if not (ok and all(type(w) is int and w >= 1 for w in hidden)):
            raise ConfigError(f"agent.hidden={hidden!r} must be a list of whole numbers >= 1 "
                              f"(the hidden layers' widths) (see {WHERE})")  # fmt: skip
        return tuple(hidden)

    def betas(self) -> tuple[float, float]:
        """agent.adam_betas: Adam's two decay rates, each in [0, 1)."""
        beta1, beta2 = settings.numbers(self.agent, "agent.adam_betas", 2, lambda v: 0 <= v < 1,
                                        "in [0, 1)", WHERE)  # fmt: skip
        return beta1, beta2

    def steps(self) -> tuple[int, int]:
        """(agent.n_step, agent.learn_start): learning may not start before the first n-step
        transition reaches the replay."""
        n_step = self.whole("n_step", 1, "env steps a transition's return spans; 1: one-step")
        learn_start = self.whole("learn_start", 0, "env steps")
        if learn_start < n_step - 1:
            raise ConfigError(
                f"agent.learn_start={learn_start} is less than agent.n_step - 1 = {n_step - 1}: "
                "the first n-step transitions reach the replay after n - 1 steps, so the first "
                f"update would sample an empty buffer; set agent.learn_start >= {n_step - 1} "
                f"(see {WHERE})"
            )
        return n_step, learn_start

    def support(self) -> tuple[int, float, float]:
        """(agent.atoms, agent.v_min, agent.v_max): C51's atoms and support."""
        atoms = settings.integer(self.agent, "agent.atoms", lambda v: 2 <= v <= c51.MAX_ATOMS,
                                 f"in [2, {c51.MAX_ATOMS}] (C51's atoms)", WHERE)  # fmt: skip
        v_min = self.num("v_min", np.isfinite, "(reward units)")
        v_max = self.num("v_max", lambda v: v > v_min and np.isfinite(v),
                         f"> agent.v_min={v_min:g} (reward units)")  # fmt: skip
        return atoms, v_min, v_max


@dataclass(frozen=True)
class AgentConfig:
    """Settings of the learner (conf/agent/dqn.yaml)."""

    hidden: tuple[int, ...]
    dueling: bool
    gamma: float
    cut_on_done: bool
    huber_kappa: float
    lr: float
    adam_betas: tuple[float, float]
    adam_eps: float
    grad_clip: float
    target_tau: float
    target_period: int
    eps_start: float
    eps_end: float
    eps_decay_steps: float
    aux_lr: float
    learn_start: int
    updates_per_step: int
    n_step: int  # 1: one-step targets; n: n-step returns cut at a trade close (nstep.py)
    noisy: bool  # factorised Gaussian noisy layers instead of epsilon-greedy (cuda/noisy.cu)
    sigma0: float  # noisy layers' initial sigma = sigma0 / sqrt(n_in)
    distributional: bool  # the C51 head: a categorical return distribution (cuda/c51.cu)
    atoms: int  # C51's atoms
    v_min: float  # C51's support [v_min, v_max], reward units
    v_max: float
    precision: str = "fp32"  # one of PRECISIONS

    @classmethod
    def from_cfg(cls, node: DictConfig) -> AgentConfig:
        """Typed and range-checked `agent` config; errors name the key, the value and the range."""
        agent = _AgentReader(node)
        num = agent.num
        hidden, adam_betas = agent.hidden(), agent.betas()
        start = num("epsilon.start", lambda v: 0 <= v <= 1, "in [0, 1]")
        n_step, learn_start = agent.steps()
        atoms, v_min, v_max = agent.support()
        return cls(
            hidden=hidden,
            dueling=agent.flag("dueling"),
            gamma=num("gamma", lambda v: 0 <= v <= 1, "in [0, 1] (discount per env step)"),
            cut_on_done=agent.flag("cut_on_done"),
            huber_kappa=num("huber_kappa", lambda v: v > 0, "> 0 (reward units)"),
            lr=num("lr", lambda v: v > 0, "> 0 (Adam's learning rate)"),
            adam_betas=adam_betas,
            adam_eps=num("adam_eps", lambda v: v > 0, "> 0"),
            grad_clip=num("grad_clip", lambda v: v >= 0, ">= 0 (0: no clipping)"),
            target_tau=num(
                "target_tau",
                lambda v: 0 <= v <= 1,
                "in [0, 1] (0: a hard sync every target_period updates)",
            ),
            target_period=settings.integer(
                agent.agent,
                "agent.target_period",
                lambda v: 1 <= v <= EXACT_IN_F32,
                f"in [1, {EXACT_IN_F32}] (learner updates; the kernels read it from the float32 "
                "ISV, whole up to 2^24)",
                WHERE,
            ),
            eps_start=start,
            eps_end=num(
                "epsilon.end", lambda v: 0 <= v <= start, f"in [0, agent.epsilon.start={start:g}]"
            ),
            eps_decay_steps=num("epsilon.decay_steps", lambda v: v > 0, "> 0 (env steps)"),
            aux_lr=num("aux_lr", lambda v: v >= 0, ">= 0 (the aux head's SGD learning rate)"),
            learn_start=learn_start,
            updates_per_step=agent.whole("updates_per_step", 1, "learner updates per env step"),
            n_step=n_step,
            noisy=agent.flag("noisy"),
            sigma0=num("sigma0", lambda v: v >= 0, ">= 0 (the noisy layers' sigma x sqrt(n_in))"),
            distributional=agent.flag("distributional"),
            atoms=atoms,
            v_min=v_min,
            v_max=v_max,
            precision=settings.choice(agent.agent, "agent.precision", PRECISIONS, WHERE),
        )


@dataclass(frozen=True)
class AlphaConfig:
    """α (conf/alpha/on.yaml): the aux head's learned bias on the directional Q-values."""

    lr: float  # w_α's Adam learning rate
    bound: float  # |w_α[a]| <= bound
    init: float  # the directional entries' initial value (FLAT's is 0)


def check_alpha(agent: AgentConfig, alpha: AlphaConfig | None) -> None:
    """α biases the Q-values and C51 learns distributions: ConfigError for the two together (the
    run's config check and the learner both ask here)."""
    if alpha is not None and agent.distributional:
        raise ConfigError(
            "alpha='on' biases the Q-values, and agent.distributional=true learns distributions: "
            "the two are not built together; use alpha='off' or agent.distributional=false"
        )
