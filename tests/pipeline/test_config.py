"""The typed configs of a run: each bad value refused before work, naming key, value and range."""

from __future__ import annotations

import pytest

from alpha_rl.errors import ConfigError
from alpha_rl.pipeline.config import BackendConfig, BetaConfig, plan_run
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
        (["reward.aux_align_weight=nan"], r"reward\.aux_align_weight=nan must be a number \(fin"),
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
