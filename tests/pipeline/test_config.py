"""The typed configs of a run: each bad value refused before work, naming key, value and range."""

from __future__ import annotations

import re

import pytest
from omegaconf import DictConfig, OmegaConf

from alpha_rl.errors import ConfigError
from alpha_rl.pipeline.configure.config import plan_run
from alpha_rl.pipeline.configure.plan import BackendConfig, BetaConfig
from alpha_rl.pipeline.configure.scale import market_and_config
from tests.helpers import compose_train


def test_the_default_config_parses_into_typed_settings() -> None:
    plan = plan_run(compose_train()[0])
    assert plan.reward.stride == 7 and plan.reward.weights == (1.0,) * 6
    assert plan.reward.aux_align_weight == 1.0 and plan.reward.scale is None  # auto
    assert plan.beta == BetaConfig("sentinel", 0.0, "none") and plan.alpha is None
    assert plan.backend == BackendConfig("auto", 0, None, True)
    assert plan.her is not None and (plan.her.threshold, plan.her.lookahead) == (1.5, 50)
    six = plan_run(compose_train(["reward=stride6", "backend=numpy"])[0])
    assert six.reward.aux_align_weight is None and six.backend.name == "numpy"


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["reward.stride=8"], r"reward\.stride=8 must be a whole number in \[6, 7\]"),
        (["reward.weights=[1,1,1]"], r"reward\.weights=\[1, 1, 1\] must be 6 numbers"),
        (["reward.opp_cost_kappa=-0.1"], r"reward\.opp_cost_kappa=-0\.1 must be a number >= 0"),
        (["reward.inventory_lambda=x"], r"reward\.inventory_lambda='x' must be a number >= 0"),
        (["reward.drawdown_rho=-1"], r"reward\.drawdown_rho=-1 must be a number >= 0"),
        (["reward.ema_alpha=0"], r"reward\.ema_alpha=0 must be a number in \(0, 1\]"),
        (["reward.ema_alpha=1.5"], r"reward\.ema_alpha=1\.5 must be a number in \(0, 1\]"),
        (["reward.aux_align_weight=nan"], r"reward\.aux_align_weight=nan must be a finite number"),
        (["reward.fee_moves_max=0"], r"reward\.fee_moves_max=0 must be a number > 0"),
        (["reward.typical_range=[10,1]"], r"reward\.typical_range=\[10\.0, 1\.0\] must be \[low"),
        (["reward.typical_range=[0,1]"], r"reward\.typical_range=\[0, 1\] must be 2 numbers"),
        (["reward.scale=-1"], r"reward\.scale=-1 must be auto .* or a number > 0"),
        (["beta.scale=0.1"], r"beta\.scale=0\.1 must be a number = 0 with beta=sentinel"),
        (["beta=active", "beta.scale=0"], r"beta\.scale=0 must be a number > 0 with beta=active"),
        (["beta.mode=on"], r"beta\.mode='on' must be one of sentinel, active"),
        (["backend.device=-1"], r"backend\.device=-1 must be a whole number >= 0"),
        (["backend.graph=1"], r"backend\.graph=1 must be true or false"),
        (["backend.name=tpu"], r"backend\.name='tpu' must be one of auto, cuda, numpy"),
        (["backend.cubin_dir=3"], r"backend\.cubin_dir=3 must be a path or null"),
        (["her='off'", "her.backward=true"], r"her\.enabled=false with her\.backward=True"),
    ],
)
def test_bad_values_are_refused_naming_key_value_and_range(overrides: list[str],
                                                           match: str) -> None:  # fmt: skip
    cfg, _ = compose_train(overrides)
    with pytest.raises(ConfigError, match=match):
        plan_run(cfg)


# the option files whose keys the default composition leaves out, so every float key is present
EVERY_SECTION = ["backend=numpy", "debug=tiny", "beta=active_controller", "alpha='on'",
                 "reward.scale=1.0"]  # fmt: skip
# float keys plan_run does not read: their own parsers take them once the run starts (the
# market's, tracking's: both refuse a non-finite value) and the ISV slots' (isv.py)
PARSED_LATER = ("market.", "tracking.", "isv.")


def _float_keys(cfg: DictConfig) -> list[str]:
    """Dotted keys of the float leaves of a composed config (lists of floats included)."""
    tree = {k: v for k, v in OmegaConf.to_container(cfg).items() if k != "hydra"}
    tree = OmegaConf.to_container(OmegaConf.create(tree), resolve=True)
    found = []

    def walk(node: object, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{prefix}.{key}" if prefix else key)
        elif isinstance(node, float) or (isinstance(node, list) and node and
                                         all(isinstance(v, float) for v in node)):  # fmt: skip
            found.append(prefix)

    walk(tree, "")
    return [k for k in found if not k.startswith(PARSED_LATER)]


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan"), 1e39])
def test_every_float_setting_refuses_a_value_float32_cannot_hold(bad: float) -> None:
    cfg, _ = compose_train(EVERY_SECTION)
    keys = _float_keys(cfg)
    assert {"agent.lr", "env.multiplier", "env.fee_per_lot", "env.lot", "reward.weights",
            "beta.gain", "alpha.bound", "her.threshold", "replay.eps"} <= set(keys)  # fmt: skip
    for key in keys:
        broken = cfg.copy()
        value = OmegaConf.select(broken, key)
        OmegaConf.update(broken, key, [bad] * len(value) if OmegaConf.is_list(value) else bad)
        with pytest.raises(ConfigError, match=rf"^{re.escape(key)}="):
            plan_run(broken)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["agent.lr=inf"],
         r"^agent\.lr=inf must be a finite number > 0 \(Adam's learning rate\); the kernels "
         r"compute in float32, whose largest magnitude is 3\.403e\+38 \(see conf/agent/\)$"),
        (["env.lot=1e39"], r"^env\.lot=1e\+39 must be a finite number > 0"),
        (["reward.scale=1e39"], r"^reward\.scale=1e\+39 must be auto or a finite number > 0"),
        (["env.lot=1e20", "env.multiplier=1e20"],
         r"^env\.lot x env\.multiplier = 1e\+20 x 1e\+20 = 1e\+40 \(the money a 1\.0 price move "
         r"pays a position\) is beyond float32's largest 3\.403e\+38"),
        (["env.lot=1e-20", "env.multiplier=1e-20"],
         r"= 1e-40 .* is below float32's smallest 1\.175e-38: the kernels compute PnL"),
        (["env.fee_per_lot=1e38", "env.lot=3"],
         r"^2 x env\.fee_per_lot x env\.lot = 2 x 1e\+38 x 3 = 6e\+38 \(a flip's two fills\)"),
        (["agent.learn_start=40"], r"^agent\.learn_start=40 is not below steps=40: the learner "
                                   r"would never update .* set agent\.learn_start < 40"),
        (["replay.batch_size=2048"],
         r"^replay\.batch_size=2048 is more than the replay holds: 2\^replay\.capacity_log2 = "
         r"2\^10 = 1024 transitions; .* raise replay\.capacity_log2 to >= 11"),
        (["env.num_envs=20", "her.closed_ring=16"],
         r"^her\.closed_ring=16 is smaller than env\.num_envs=20: .* >= 32"),
    ],
)  # fmt: skip
def test_values_that_cannot_run_are_refused_before_any_work(overrides: list[str],
                                                             match: str) -> None:  # fmt: skip
    cfg, _ = compose_train(["backend=numpy", "debug=tiny", *overrides])
    with pytest.raises(ConfigError, match=match):
        plan_run(cfg)


def test_a_learn_start_below_steps_is_taken() -> None:
    plan = plan_run(compose_train(["debug=tiny", "agent.learn_start=50", "steps=60"])[0])
    assert (plan.agent.learn_start, plan.run.steps) == (50, 60)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["market.tick_size=1.0", "env.lot=1e19", "env.multiplier=1e19"],
         r"^a trade's PnL can reach [0-9.]+ USD \(the market's largest ask less its smallest "
         r"bid\) x env\.multiplier x env\.lot 1e\+38 = 7\.8e\+39, beyond float32's largest"),
        (["reward.scale=1e38"], r"^a step's \|reward\| can reach [0-9.e+]+ \(reward\.weights x "
                                r"components .* x reward\.scale 1e\+38 = .* lower reward\.scale"),
        (["env.lot=2e-19", "env.multiplier=1e-19"],
         r"^reward\.scale resolves to [0-9.]+e\+39, beyond float32's largest"),
        (["eval.steps=100000"],
         r"^eval\.steps=100000 is more than the held-out part's 800 ticks \(single split: .*\): an "
         r"evaluation would step through them about 125 times over; set eval\.steps <= 800"),
        (["market.depth_size=[1,1e39]"],
         r"^market\.depth_size=1e\+39: expected a number float32 can hold \(\|x\| <= 3\.4"),
        (["market.start_price=1e30", "reward.scale=1.0"],  # a tick lost in float64 at 1e30
         r"the mid price never moves over the \d+ training steps: there is nothing to learn"),
    ],
)  # fmt: skip
def test_values_the_market_shows_cannot_run_are_refused_before_the_run(
    overrides: list[str], match: str
) -> None:
    cfg, _ = compose_train(["backend=numpy", "debug=tiny", *overrides])
    plan = plan_run(cfg)
    with pytest.raises(ConfigError, match=match) as caught:
        market_and_config(cfg, plan.run.seed, plan.validation)
    assert "\n" not in str(caught.value)
