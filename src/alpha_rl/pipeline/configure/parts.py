"""The parts of a run that own ISV slots, and the layout they fill.

A part (the reward, β, HER, the replay, the learner, α) declares its slots' places in its config
group (`isv.slots.<group>.<name>: {index, count, kind, doc}`) and computes their initial values
from its own typed, range-checked config here: `reward_weight` from `RewardConfig.weights`,
`her_threshold` from `HerConfig.threshold`, and so on. An `init` given for an owned slot (in a
YAML file or as `isv.slots.her.her_threshold.init=-5`) is refused, naming the setting to use, so
every number a kernel reads as a parameter has passed its range check. The slots each part's
kernels read are required, so a layout without one is refused before any work. A slot is
declared only under a name the code reads: the SLOT_* names of alpha_rl.vocabulary, through
which every reader (env, hindsight, replay, the learner's batch, the trainer's log point) takes
its index (tests/test_isv.py holds each name to a reader); any other is refused.

Every number takes one route: the run's plan (`alpha_rl.pipeline.configure.plan.Plan`, each part's
config parsed and checked once, reward.scale resolved from the market, β's anneal kept on a
resume) -> its part's fill -> the ISV. `layout_from_plan(cfg, choices, plan)` is the validated
layout: the slots' places from the composed config, their values from the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from alpha_rl import vocabulary as vocab
from alpha_rl.agent.config import AgentConfig
from alpha_rl.agent.noise import exploration_of
from alpha_rl.errors import IsvLayoutError
from alpha_rl.her_variant import DIRECTIONS
from alpha_rl.hindsight import DIRECTION_FLAGS, STEP_COUNTS
from alpha_rl.isv import IsvLayout, Owned, build_layout
from alpha_rl.kernels.reward import RC_AUX_ALIGN, has_aux_align
from alpha_rl.replay import ReplayConfig

if TYPE_CHECKING:
    from alpha_rl.pipeline.configure.plan import Plan

Values = dict[str, tuple[float, ...]]  # slot -> its initial values
Fill = tuple[Values, list[tuple[str, str]]]  # and (slot, why) of each slot its kernels need


@dataclass(frozen=True)
class Part:
    """One owner of ISV slots: its name, the slots whose initial values it computes (with the
    setting each comes from), and `fill(plan)`: those values from its checked config in the
    run's plan, plus the slots its kernels need (an empty fill when the part is off)."""

    name: str
    owns: Mapping[str, str]  # slot -> the setting its initial value comes from
    fill: Callable[[Plan], Fill]


def _reward(plan: Plan) -> Fill:
    r = plan.reward
    if r.scale is None:
        raise IsvLayoutError(
            "reward.scale=auto is resolved from the market's training ticks once the market is "
            "built (alpha_rl.pipeline.configure.scale): build the layout from the run's resolved "
            "config, or pass a number"
        )
    values = {
        vocab.SLOT_REWARD_WEIGHT: r.weights,
        vocab.SLOT_REWARD_SCALE: (r.scale,),
        vocab.SLOT_OPP_COST_KAPPA: (r.opp_cost_kappa,),
        vocab.SLOT_INVENTORY_LAMBDA: (r.inventory_lambda,),
        vocab.SLOT_DRAWDOWN_RHO: (r.drawdown_rho,),
        vocab.SLOT_REWARD_EMA_ALPHA: (r.ema_alpha,),
    }
    diag = (vocab.SLOT_REWARD_COMPONENT_EMA, vocab.SLOT_REWARD_ABS_EMA, vocab.SLOT_REWARD_MAG_RATIO)
    need = [(slot, "the reward kernels") for slot in (*values, *diag)]
    if r.aux_align_weight is not None:  # stride 7: c6 paid at w_6 and scale_β (β's slot)
        values[vocab.SLOT_W_AUX_ALIGN] = (r.aux_align_weight,)
        c6 = (vocab.SLOT_W_AUX_ALIGN, vocab.SLOT_REWARD_AUX_ALIGN_EMA, vocab.SLOT_AUX_ALIGN_SCALE)
        need += [(slot, "reward=stride7") for slot in c6]
    return values, need


def _beta(plan: Plan) -> Fill:
    b, stride = plan.beta, plan.reward.stride
    if b.mode == "active" and not has_aux_align(stride):
        raise IsvLayoutError(
            "beta=active needs reward=stride7: the β aux-align reward is component "
            f"{RC_AUX_ALIGN}, which the {stride}-component layout does not have; "
            "use reward=stride7 or beta=sentinel"
        )
    values, need = {vocab.SLOT_AUX_ALIGN_SCALE: (b.scale,)}, []
    if b.controller == "share":  # its numbers in CONTROLLER_NUMBERS' order
        why = "beta.controller=share (beta=active_controller has the slots)"
        values[vocab.SLOT_BETA_CONTROLLER] = (b.gain, b.target_share, b.w_max)
        need += [(vocab.SLOT_AUX_SHARE, why), (vocab.SLOT_BETA_CONTROLLER, why)]
    return values, need


def _her(plan: Plan) -> Fill:
    her = plan.her
    if her is None:
        return {}, []
    values = {
        vocab.SLOT_HER_THRESHOLD: (her.threshold,),
        vocab.SLOT_HER_PRIORITY_BOOST: (her.priority_boost,),
    }
    need = [(s, f"HER {d} inject") for d in DIRECTIONS if d in her.variant.directions
            for s in (*values, STEP_COUNTS[d][0])]  # fmt: skip
    for direction, slot in DIRECTION_FLAGS.items():  # the variant as numbers her_inject reads
        if direction in her.variant.directions:
            values[slot] = (1.0,)
    if her.forward:  # forward's own setting
        values[vocab.SLOT_HER_FORWARD_LOOKAHEAD] = (float(her.lookahead),)
        need.append((vocab.SLOT_HER_FORWARD_LOOKAHEAD, "HER forward inject"))
    return values, need


def replay_numbers(r: ReplayConfig) -> Values:
    """The replay's numbers its kernels (and HER's) read from the ISV, from its checked config
    (beta's anneal resolved)."""
    return {
        vocab.SLOT_PER_ALPHA: (r.alpha,),
        vocab.SLOT_PER_EPS: (r.eps,),
        vocab.SLOT_PER_BETA_SCHEDULE: (r.beta0, float(r.beta_anneal_updates)),
    }


def _replay(plan: Plan) -> Fill:
    values = replay_numbers(plan.replay)
    need = [(vocab.SLOT_PER_BETA, "the replay's importance weights")]
    return values, need + [(slot, "the replay's kernels") for slot in values]


def _env(plan: Plan) -> Fill:
    e = plan.env
    p = e.perception
    values = {
        vocab.SLOT_ENV_COSTS: (e.lot, e.lot * e.multiplier, e.fee_per_lot),
        vocab.SLOT_ENV_TRADING: (float(e.decision_interval), float(e.min_hold)),
        vocab.SLOT_PERCEPTION_SCALES: (1.0 / p.pnl_scale_ticks, 1.0 / p.time_scale_steps),
    }
    return values, [(vocab.SLOT_ENV_COSTS, "the env step"),
                    (vocab.SLOT_ENV_TRADING, "the env step"),
                    (vocab.SLOT_PERCEPTION_SCALES, "the observation")]  # fmt: skip


def learner_numbers(a: AgentConfig) -> Values:
    """The learner's numbers its kernels (and n-step's and HER's) read from the ISV, from its
    checked config: Adam's in ADAM_NUMBERS' order, epsilon's schedule as its exploration piece
    acts (noisy: 0, 0), C51's support."""
    start, end = exploration_of(a).epsilon(a)
    return {
        vocab.SLOT_GAMMA: (a.gamma,),
        vocab.SLOT_HUBER_KAPPA: (a.huber_kappa,),
        vocab.SLOT_CUT_ON_DONE: (float(a.cut_on_done),),
        vocab.SLOT_ADAM: (
            a.lr,
            *a.adam_betas,
            a.adam_eps,
            a.grad_clip,
            a.target_tau,
            float(a.target_period),
        ),
        vocab.SLOT_EPSILON_SCHEDULE: (start, end, a.eps_decay_steps),
        vocab.SLOT_AUX_LR: (a.aux_lr,),
        vocab.SLOT_C51_SUPPORT: (a.v_min, a.v_max),
    }


def _learner(plan: Plan) -> Fill:
    values = learner_numbers(plan.agent)
    slots = (vocab.SLOT_LOSS_Q, vocab.SLOT_LOSS_AUX, vocab.SLOT_EPSILON, vocab.SLOT_GRAD_NORM,
             *values)  # fmt: skip
    return values, [(slot, "the learner") for slot in slots]


def _alpha(plan: Plan) -> Fill:
    alpha, a = plan.alpha, plan.agent
    if alpha is None:
        return {}, []
    # w_α's Adam, in ALPHA_NUMBERS' order
    values = {vocab.SLOT_ALPHA_ADAM: (alpha.lr, *a.adam_betas, a.adam_eps, alpha.bound,
                                      a.target_tau, float(a.target_period))}  # fmt: skip
    slots = (vocab.SLOT_W_ALPHA_LONG, vocab.SLOT_W_ALPHA_SHORT, vocab.SLOT_ALPHA_ADAM)
    return values, [(s, "alpha='on'") for s in slots]


PARTS: tuple[Part, ...] = (
    Part(
        "reward",
        {
            vocab.SLOT_REWARD_WEIGHT: "reward.weights",
            vocab.SLOT_REWARD_SCALE: "reward.scale",
            vocab.SLOT_OPP_COST_KAPPA: "reward.opp_cost_kappa",
            vocab.SLOT_INVENTORY_LAMBDA: "reward.inventory_lambda",
            vocab.SLOT_DRAWDOWN_RHO: "reward.drawdown_rho",
            vocab.SLOT_REWARD_EMA_ALPHA: "reward.ema_alpha",
            vocab.SLOT_W_AUX_ALIGN: "reward.aux_align_weight",
        },
        _reward,
    ),
    Part(
        "beta",
        {
            vocab.SLOT_AUX_ALIGN_SCALE: "beta.scale",
            vocab.SLOT_BETA_CONTROLLER: "beta.gain, beta.target_share and beta.w_max",
        },
        _beta,
    ),
    Part(
        "HER",
        {
            vocab.SLOT_HER_THRESHOLD: "her.threshold",
            vocab.SLOT_HER_PRIORITY_BOOST: "her.priority_boost",
            vocab.SLOT_HER_FORWARD_LOOKAHEAD: "her.lookahead",
            vocab.SLOT_HER_BACKWARD: "her (the variant: her=backward or 'on')",
            vocab.SLOT_HER_FORWARD: "her (the variant: her=forward or 'on')",
        },
        _her,
    ),
    Part(
        "environment",
        {
            vocab.SLOT_ENV_COSTS: "env.lot, env.multiplier and env.fee_per_lot",
            vocab.SLOT_ENV_TRADING: "env.decision_interval and env.min_hold",
            vocab.SLOT_PERCEPTION_SCALES: "env.perception.pnl_scale_ticks and "
            "env.perception.time_scale_steps",
        },
        _env,
    ),
    Part(
        "replay",
        {
            vocab.SLOT_PER_ALPHA: "replay.alpha",
            vocab.SLOT_PER_EPS: "replay.eps",
            vocab.SLOT_PER_BETA_SCHEDULE: "replay.beta0 and replay.beta_anneal_updates",
        },
        _replay,
    ),
    Part(
        "learner",
        {
            vocab.SLOT_GAMMA: "agent.gamma",
            vocab.SLOT_HUBER_KAPPA: "agent.huber_kappa",
            vocab.SLOT_CUT_ON_DONE: "agent.cut_on_done",
            vocab.SLOT_ADAM: "agent.lr, agent.adam_betas, agent.adam_eps, agent.grad_clip, "
            "agent.target_tau and agent.target_period",
            vocab.SLOT_EPSILON_SCHEDULE: "agent.epsilon",
            vocab.SLOT_AUX_LR: "agent.aux_lr",
            vocab.SLOT_C51_SUPPORT: "agent.v_min and agent.v_max",
        },
        _learner,
    ),
    Part(
        "alpha",
        {
            vocab.SLOT_ALPHA_ADAM: "alpha.lr and alpha.bound (with agent.adam_betas, "
            "agent.adam_eps, agent.target_tau and agent.target_period)",
        },
        _alpha,
    ),
)


OWNED = frozenset(slot for part in PARTS for slot in part.owns)
# the slot names the code reads: every reader takes a slot's index by its vocabulary name
READ = frozenset(value for key, value in vars(vocab).items() if key.startswith("SLOT_"))


def recorded_init(key: str) -> bool:
    """Whether a flattened config key is an owned slot's `isv.slots.<group>.<slot>.init`: runs
    and checkpoints recorded before the parts set those slots carry it, with the value of the
    part's setting, which is compared in its place (a resume, the kill check's pairing)."""
    words = key.split(".")
    return (
        len(words) == 5
        and words[:2] == ["isv", "slots"]
        and words[4] == "init"
        and (words[3] in OWNED)
    )


def owned_slots(plan: Plan) -> tuple[dict[str, Owned], list[tuple[str, str]]]:
    """Every owned slot (with its part, setting and, where the part is on, its initial values)
    and every (slot, why) the enabled parts' kernels need."""
    owned, need = {}, []
    for part in PARTS:
        values, needed = part.fill(plan)
        for slot, setting in part.owns.items():
            owned[slot] = Owned(part.name, setting, values.get(slot))
        need += needed
    return owned, need


def layout_from_plan(cfg: DictConfig, choices: Mapping[str, str] | None, plan: Plan) -> IsvLayout:
    """The validated ISV layout of the composed config `cfg`: the slots the config groups declare,
    each owned slot's initial values from its part's checked config in `plan` (the run's).
    `choices` (Hydra's runtime.choices) names the files in errors."""
    owned, need = owned_slots(plan)
    return build_layout(cfg, dict(choices or {}), owned, need, READ)
