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


def test_an_owned_slots_init_recorded_by_an_older_run_does_not_keep_it_from_pairing() -> None:
    old_off = her_run("old-off", "off", 100)  # recorded when the ISV slots had an init param
    old_off.params["isv.slots.reward.reward_weight.init"] = "[1.0, 1.0, 1.0, 1.0, 1.0, 1.0]"
    new_on = her_run("new-on", "on", 200)
    pairing = pair_runs([old_off, new_on], axis_for("her"), ())
    assert [(a.run_id, b.run_id) for a, b in pairing.arms["on"]] == [("new-on", "old-off")]
    other = her_run("probe-off", "off", 300, seed=1)  # an init of a slot no part owns still counts
    other.params["isv.slots.probe.my_probe.init"] = "2.0"
    pairing = pair_runs([other, her_run("on-1", "on", 400, seed=1)], axis_for("her"), ())
    assert pairing.arms.get("on", []) == [] and len(pairing.unpaired) == 2
