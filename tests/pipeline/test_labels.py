"""What a run is called: what sets it apart within its sweep, short enough for a chart's legend."""

from __future__ import annotations

import pytest

from alpha_rl.pipeline.life.labels import run_name
from tests.helpers import compose_fixed


@pytest.mark.parametrize(
    ("overrides", "name"),
    [
        ([], "her-on s0"),
        (["her=off", "seed=3"], "her-off s3"),
        (["agent=rainbow", "market.fold=2", "seed=1"], "her-on agent-rainbow s1 f2"),
        (["beta=active", "reward=stride7", "search.trial=14"], "her-on beta-active t14 s0"),
    ],
)
def test_a_run_is_named_by_what_sets_it_apart(overrides: list[str], name: str) -> None:
    cfg, choices = compose_fixed(overrides)
    assert run_name(cfg, choices) == name


def test_the_market_and_the_preset_stay_out_of_the_name() -> None:
    cfg, choices = compose_fixed(["experiment=her_ablation", "her=off"])
    assert run_name(cfg, choices) == "her-off s0"
    assert cfg.market.name not in run_name(cfg, choices)
