"""Runs are paired by their params, never by their names: a config run twice pairs in the order
its runs started."""

from __future__ import annotations

from alpha_rl.killcheck.axes import axis_for
from alpha_rl.killcheck.pairs import pair_runs
from alpha_rl.tracking.reader import RunRecord


def her_run(run_id: str, her: str, start: int, seed: int = 0) -> RunRecord:
    """A run of her=on or off with the name a run gets (`her-on s0`), started at `start` ms."""
    on = str(her == "on")
    params = {"seed": str(seed), "her.enabled": on, "her.backward": on, "her.forward": on}
    return RunRecord(run_id, f"her-{her} s{seed}", "FINISHED", params, {}, {}, start)


def test_runs_of_one_name_pair_by_params_and_in_the_order_they_started() -> None:
    runs = [her_run("z-on", "on", 1000), her_run("a-on", "on", 3000),
            her_run("b-off", "off", 2000), her_run("y-off", "off", 4000),
            her_run("c-on", "on", 500, seed=1), her_run("d-off", "off", 600, seed=1)]  # fmt: skip
    pairing = pair_runs(runs, axis_for("her"), ())
    pairs = [(a.run_id, b.run_id) for a, b in pairing.arms["on"]]
    assert sorted(pairs) == [("a-on", "y-off"), ("c-on", "d-off"), ("z-on", "b-off")]
    assert pairing.unpaired == []
