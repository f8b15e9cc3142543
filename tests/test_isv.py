"""ISV layout: composition of every variant, validation errors, the device vector."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import numpy as np
import pytest

import alpha_rl
from alpha_rl import vocabulary
from alpha_rl.backend.numpy import NumpyBackend
from alpha_rl.errors import ConfigError, IsvLayoutError
from alpha_rl.isv import ABSENT, DeviceIsv
from alpha_rl.pipeline.configure.config import layout_from_config
from alpha_rl.pipeline.configure.parts import READ
from tests.helpers import compose_fixed

HER = ("on", "off", "backward", "forward")
REWARD = ("stride6", "stride7")
BETA = ("sentinel", "active")

SEED_SLOTS = {  # the seed plan's indices, kept as defaults (DESIGN §5)
    "reward_aux_align_ema": 536,
    "w_aux_align": 537,
    "her_threshold": 549,
    "her_priority_boost": 550,
    "her_inject_count": 551,
    "her_forward_lookahead": 552,
}


@pytest.mark.parametrize(("her", "reward", "beta"), list(itertools.product(HER, REWARD, BETA)))
def test_every_variant_composes_or_is_refused_with_reason(her: str, reward: str, beta: str) -> None:
    cfg, choices = compose_fixed([f"her={her}", f"reward={reward}", f"beta={beta}"])
    if beta == "active" and reward == "stride6":
        with pytest.raises(IsvLayoutError, match="beta=active needs reward=stride7"):
            layout_from_config(cfg, choices)
        return
    layout = layout_from_config(cfg, choices)
    names = set(layout.names())
    assert cfg.reward.stride == int(reward[-1])
    assert ("w_aux_align" in names) == (reward == "stride7")
    assert ("her_threshold" in names) == (her != "off")
    assert ("her_inject_count" in names) == (her in ("on", "backward"))
    assert ("her_forward_lookahead" in names) == (her in ("on", "forward"))
    assert cfg.her.enabled == (her != "off")
    assert cfg.her.backward == (her in ("on", "backward"))
    assert cfg.her.forward == (her in ("on", "forward"))
    for name, index in SEED_SLOTS.items():
        if name in names:
            assert layout.slot(name).index == index
    scale = layout.slot("aux_align_scale").init[0]
    assert (scale == 0.0) == (beta == "sentinel")


def test_defaults_are_her_on_stride7_beta_sentinel() -> None:
    cfg, choices = compose_fixed()
    assert (choices["her"], choices["reward"], choices["beta"]) == ("on", "stride7", "sentinel")
    layout = layout_from_config(cfg, choices)
    assert layout.slot("her_threshold").init == (1.5,)
    assert layout.slot("her_priority_boost").init == (3.0,)
    assert layout.slot("her_forward_lookahead").init == (50.0,)


def test_slot_init_follows_the_group_setting() -> None:
    cfg, choices = compose_fixed(["her.threshold=2.25", "reward.weights=[1,2,3,4,5,6]"])
    layout = layout_from_config(cfg, choices)
    vec = layout.initial_values()
    assert vec[layout.slot("her_threshold").index] == np.float32(2.25)
    weights = layout.slot("reward_weight")
    assert vec[weights.index : weights.stop].tolist() == [1, 2, 3, 4, 5, 6]


def test_index_clash_names_both_slots_the_index_and_the_groups() -> None:
    # aux_share: a slot the code reads, which beta=sentinel (the default) does not declare
    cfg, choices = compose_fixed(["+isv.slots.probe.aux_share={index:550,init:0,doc:probe}"])
    with pytest.raises(IsvLayoutError) as err:
        layout_from_config(cfg, choices)
    msg = str(err.value)
    assert "index 550" in msg
    assert "'her_priority_boost'" in msg and "'aux_share'" in msg
    assert "her=on" in msg and "isv.slots.probe" in msg


def test_clash_between_two_config_groups_names_both_options() -> None:
    cfg, choices = compose_fixed(["beta=sentinel", "isv.slots.beta.aux_align_scale.index=549"])
    with pytest.raises(IsvLayoutError) as err:
        layout_from_config(cfg, choices)
    msg = str(err.value)
    assert "index 549" in msg and "'aux_align_scale'" in msg and "'her_threshold'" in msg
    assert "beta=sentinel" in msg and "her=on" in msg


def test_overlap_of_a_multi_float_slot_is_a_clash() -> None:
    cfg, choices = compose_fixed(
        ["reward.ema_alpha=0.5", "isv.slots.reward.reward_ema_alpha.index=35"]
    )
    with pytest.raises(IsvLayoutError, match="clash at index 35: 'reward_component_ema'"):
        layout_from_config(cfg, choices)


def test_same_name_in_two_groups_is_refused() -> None:
    cfg, choices = compose_fixed(["+isv.slots.probe.her_threshold={index:900,doc:dup}"])
    with pytest.raises(IsvLayoutError, match="'her_threshold' is declared twice"):
        layout_from_config(cfg, choices)


@pytest.mark.parametrize(
    ("override", "says"),
    [("+isv.slots.foo.bar={index: 600, doc: x}", "isv.slots.foo.bar: no part of the code reads "
      "an ISV slot named 'bar', so it would do nothing; remove it, or, for a new slot, name it "
      "in alpha_rl/vocabulary.py (SLOT_*)"),
     ("+isv.slots.her.extra={index: 700, init: 3, doc: x}", "isv.slots.her.extra: no part of "
      "the code reads an ISV slot named 'extra'"),
     ("+isv.slots.her.her_treshold={index: 700, doc: x}", "named 'her_treshold' (did you mean "
      "'her_threshold'?)")],
)  # fmt: skip
def test_a_slot_that_nothing_reads_is_refused_naming_the_key(override: str, says: str) -> None:
    cfg, choices = compose_fixed([override])
    with pytest.raises(IsvLayoutError) as err:
        layout_from_config(cfg, choices)
    assert says in str(err.value) and "\n" not in str(err.value)


def _slot_names_read_by(path: Path) -> set[str]:
    """The vocabulary's SLOT_* names a module refers to (vocab.SLOT_X or an imported SLOT_X)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    found |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    return {name for name in found if name.startswith("SLOT_")}


def test_every_slot_name_the_layout_takes_has_a_reader() -> None:
    """The names a layout takes (parts.READ: the vocabulary's SLOT_*) are those the code reads:
    each is taken by a module besides the vocabulary and the layout's own (env, hindsight,
    replay, the learner's batch, the trainer's log point), so a slot under any other name, or
    under a name that lost its reader, would do nothing."""
    package = Path(alpha_rl.__file__).parent
    declaring = {package / "vocabulary.py", package / "parts.py", package / "isv.py"}
    read = set().union(*(_slot_names_read_by(p) for p in package.rglob("*.py")
                         if p not in declaring))  # fmt: skip
    named = {key for key in vars(vocabulary) if key.startswith("SLOT_")}
    assert {getattr(vocabulary, key) for key in named} == READ
    assert named and not named - read, f"slot names no module reads: {sorted(named - read)}"


def test_the_reader_check_sees_a_slot_name(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from alpha_rl import vocabulary as vocab\nx = at(vocab.SLOT_PER_BETA)\n")
    assert _slot_names_read_by(module) == {"SLOT_PER_BETA"}


def test_index_beyond_size_is_refused() -> None:
    cfg, choices = compose_fixed(["isv.size=612"])  # env_costs sits at 610..612, the last slot
    with pytest.raises(
        IsvLayoutError,
        match=r"'env_costs'.*conf/env/default.yaml.*occupies "
        r"610..612, beyond isv.size=612",
    ):
        layout_from_config(cfg, choices)


def test_stride7_needs_betas_scale_slot() -> None:
    cfg, choices = compose_fixed(["beta=active", "~isv.slots.beta.aux_align_scale"])
    with pytest.raises(IsvLayoutError, match="'aux_align_scale' \\(needed by reward=stride7\\)"):
        layout_from_config(cfg, choices)


def test_an_owned_slot_of_the_wrong_count_names_the_setting() -> None:
    cfg, choices = compose_fixed(["isv.slots.reward.reward_weight.count=5"])
    with pytest.raises(IsvLayoutError, match="count=5: the reward part sets 6 value"):
        layout_from_config(cfg, choices)


def test_missing_required_slot_is_named_with_its_reason() -> None:
    cfg, choices = compose_fixed(["~isv.slots.her.her_forward_lookahead"])
    with pytest.raises(IsvLayoutError, match="'her_forward_lookahead' \\(needed by HER forward"):
        layout_from_config(cfg, choices)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("isv.slots.her.her_threshold.index=-1", "index must be >= 0"),
        ("isv.slots.her.her_threshold.index=1.5", "index: expected an integer"),
        ("isv.slots.her.her_threshold.doc=''", "needs a one-line description"),
        ("+isv.slots.her.her_threshold.kind=weird", "kind: expected one of"),
        ("+isv.slots.her.her_threshold.colour=red", "unknown keys \\['colour'\\]"),
    ],
)
def test_malformed_slot_names_the_key(override: str, message: str) -> None:
    cfg, choices = compose_fixed([override])
    with pytest.raises(IsvLayoutError, match=message):
        layout_from_config(cfg, choices)


def test_a_setting_an_owned_slot_takes_is_range_checked_by_its_part() -> None:
    cfg, choices = compose_fixed(["reward.weights=[1,2,3]"])
    with pytest.raises(ConfigError, match=r"reward.weights=\[1, 2, 3\] must be 6 numbers"):
        layout_from_config(cfg, choices)


@pytest.mark.parametrize(
    ("override", "setting"),
    [
        ("+isv.slots.her.her_threshold.init=-5", "her.threshold"),
        ("+isv.slots.reward.reward_weight.init=[9,9,9,9,9,9]", "reward.weights"),
        ("+isv.slots.her.her_forward_lookahead.init=7", "her.lookahead"),
        ("+isv.slots.beta.aux_align_scale.init=0.5", "beta.scale"),
    ],
)
def test_an_owned_slots_init_override_is_refused_naming_the_setting(
    override: str, setting: str
) -> None:
    cfg, choices = compose_fixed([override])
    with pytest.raises(IsvLayoutError, match=f"part, which sets its initial value from {setting}"):
        layout_from_config(cfg, choices)


def test_an_owned_slot_of_a_part_that_is_off_is_refused() -> None:
    cfg, choices = compose_fixed(
        ["her=backward", "+isv.slots.her.her_forward_lookahead={index:552,doc:lookahead}"]
    )
    with pytest.raises(IsvLayoutError, match="which this config does not enable"):
        layout_from_config(cfg, choices)


def test_an_owned_slot_takes_the_checked_setting_not_yaml() -> None:
    cfg, choices = compose_fixed(["her.lookahead=7", "reward.scale=0.25"])
    layout = layout_from_config(cfg, choices)
    assert layout.slot("her_forward_lookahead").init == (7.0,)
    assert layout.slot("reward_scale").init == (0.25,)
    with pytest.raises(ConfigError, match=r"her\.threshold=-5 must be a number >= 0"):
        layout_from_config(*compose_fixed(["her.threshold=-5"]))


def test_every_slot_name_of_the_vocabulary_is_declared_by_a_config_group() -> None:
    cfg, choices = compose_fixed(["beta=active_controller", "alpha='on'"])
    declared = set(layout_from_config(cfg, choices).names())
    named = {value for key, value in vars(vocabulary).items() if key.startswith("SLOT_")}
    assert named and not named - declared, sorted(named - declared)


def test_device_isv_holds_the_initial_values_and_table_lists_every_slot() -> None:
    cfg, choices = compose_fixed()
    layout = layout_from_config(cfg, choices)
    isv = DeviceIsv(layout, NumpyBackend())
    assert isv.array.dtype == np.float32 and isv.array.shape == (1024,)
    np.testing.assert_array_equal(isv.read(), layout.initial_values())
    assert isv.values("her_threshold").tolist() == [1.5]
    assert layout.index("her_threshold") == np.int32(549)
    assert isinstance(layout.index("her_threshold"), np.int32)
    table = layout.table()
    for slot in layout.slots:
        assert slot.name in table
    assert "549" in table and "her=on" in table


def test_one_lookup_gives_a_slot_index_or_absent() -> None:
    cfg, choices = compose_fixed(["her='off'"])
    layout = layout_from_config(cfg, choices)
    assert layout.index_or_absent("per_beta") == int(layout.index("per_beta"))
    assert layout.index_or_absent("her_threshold") == ABSENT == -1  # her='off' declares none
