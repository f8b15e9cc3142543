"""HER on the numpy backend: the seed's oracle tests and kill criteria (the same scenarios run on
the cuda backend in tests/kernels/test_her.py)."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_rl.backend.base import Backend
from alpha_rl.backend.numpy import NumpyBackend
from alpha_rl.errors import ConfigError
from alpha_rl.her_variant import HerVariant
from alpha_rl.hindsight import HerConfig
from alpha_rl.pipeline.configure.config import plan_run
from alpha_rl.reference import her as oracle
from tests.helpers import compose_train
from tests.her_scenarios import (
    FLAT,
    INJECT_TABLE,
    LONG,
    SHORT,
    Stepper,
    build,
    run_inject_table,
    wave_book,
)


def check_track_accumulates_peak(backend: Backend) -> None:
    env, replay, hs, _, _ = build(backend, wave_book(), ["env.num_envs=1"])
    env.reset(np.array([2]))
    run = Stepper(env, replay, hs)
    peaks = []
    run.step(np.array([LONG]))  # open long at tick 2 on rising mids
    for _ in range(20):
        peaks.append(float(run.her_state("peak_mid")[0]))
        run.step(np.array([LONG]))
    assert np.all(np.diff(peaks) >= 0) and peaks[-1] > peaks[0], peaks
    run.step(np.array([SHORT]))  # flip to short at the top of the wave, mids now fall
    shorts = []
    for _ in range(15):
        shorts.append(float(run.her_state("peak_mid")[0]))
        run.step(np.array([SHORT]))
    assert np.all(np.diff(shorts) <= 0) and shorts[-1] < shorts[0], shorts
    price_ref = env.device_book.price_ref
    assert min(abs(p + price_ref) for p in shorts) > 0, "never the zero-initialised peak"
    assert run.her_state("dir")[0] == -1 and run.her_state("count")[0] == 16


def test_track_accumulates_peak() -> None:
    check_track_accumulates_peak(NumpyBackend())


def check_inject_table(backend: Backend) -> None:
    out = run_inject_table(backend, INJECT_TABLE)
    fired = [i for i, c in enumerate(INJECT_TABLE) if c["fires"]]
    assert out["isv"][3] == len(fired) and int(out["counters"][1]) == len(fired)
    assert int(out["rstate"][0]) == 10 + len(fired)
    for k, row in enumerate(fired):  # slots 10, 11, ... in env order
        case, slot = INJECT_TABLE[row], 10 + k
        peak_pnl = case["dir"] * (case["peak"] - case["entry"]) * 10.0
        assert out["s_h_t"].reshape(-1, 2)[slot].tolist() == [2 * row, 2 * row + 1]
        assert out["s_h_tp1"].reshape(-1, 2)[slot].tolist() == [2 * row, 2 * row + 1]
        assert out["s_action"][slot] == 2 and out["s_done"][slot] == 1.0
        assert out["s_reward"][slot] == pytest.approx(peak_pnl * 0.5)
        assert out["s_synthetic"][slot] == 1
        assert out["s_discount"][slot] == np.float32(0.9)  # one step: gamma
        assert out["leaves"][slot] == pytest.approx(3.0**0.6 * 2.0, rel=1e-6)
    untouched = np.r_[0:10, 10 + len(fired) : 64]
    assert not out["s_synthetic"][untouched].any() and (out["s_action"][untouched] == -1).all()
    assert not out["s_discount"][untouched].any()


def test_inject_fires_on_done_with_peak() -> None:
    check_inject_table(NumpyBackend())


def _ring(age_and_episode: list[tuple[int, int, float, float]]):
    """A ring whose slot k holds a long trade (entry 10, actual a_k) closed at step 100 - age_k,
    for env k, in episode e_k; the env's current episode is 0 and its mid m_k."""
    R = 8
    n = len(age_and_episode)
    ring = {"f_entry": np.full(R, 10.0, np.float32), "f_exit_step": np.zeros(R, np.int64),
            "f_dir": np.zeros(R, np.int32), "f_actual": np.zeros(R, np.float32),
            "f_env": np.zeros(R, np.int32), "f_episode": np.zeros(R, np.int32),
            "f_h": np.arange(R * 2, dtype=np.float32)}  # fmt: skip
    mids = np.zeros(n, np.float32)
    for k, (age, episode, actual, mid) in enumerate(age_and_episode):
        ring["f_exit_step"][k], ring["f_dir"][k], ring["f_actual"][k] = 100 - age, 1, actual
        ring["f_env"][k], ring["f_episode"][k], mids[k] = k, episode, mid
    return ring, mids


FORWARD_TABLE = [  # (age, episode, actual, current mid): lookahead 5, threshold 1.5, lot_mult 10
    (4, 0, 1.0, 20.0),  # too early: waits, stays
    (5, 0, 1.0, 20.0),  # due: 100 > 1.5 -> fires, cleared
    (7, 0, 70.0, 20.0),  # due: 100 < 105 -> no, cleared
    (11, 0, 1.0, 20.0),  # older than 2 * lookahead: expired, cleared
    (6, 1, 1.0, 20.0),  # the env restarted its episode: expired, cleared
    (5, 0, -3.0, 9.0),  # forward pnl -10 < 0 -> no, cleared
    (10, 0, 2.0, 12.0),  # age = 2 * lookahead still counts: 20 > 3 -> fires
]


def run_forward(
    backend: Backend, ring: dict, mids: np.ndarray, head: int, tail: int = 0, W: int = 8
) -> dict[str, np.ndarray]:
    """her_forward once at step 100 over `ring` (R = 8) with `head` claims made and the tail at
    `tail`, W threads; lookahead 5, threshold 1.5, boost 1, reward scale 0.5, lot_mult 10."""
    from alpha_rl.kernels import her
    from alpha_rl.kernels.runtime import KernelRuntime

    up = backend.upload
    counters = np.zeros(her.COUNTERS, np.uint64)
    counters[oracle.STEP], counters[oracle.RING_TAIL] = 100, tail
    ring_state = np.zeros(8, np.uint64)
    ring_state[0] = head
    isv = np.zeros(8, np.float32)
    isv[[0, 1, 2, 3]] = [1.5, 1.0, 0.5, 5.0]  # threshold, boost, scale, lookahead
    isv[[5, 6, 7]] = [0.6, 0.9, 10.0]  # the replay's alpha, the learner's gamma, lot_mult
    dev = {k: up(v) for k, v in ring.items()}
    store = {"s_h_t": up(np.zeros(64, np.float32)), "s_h_tp1": up(np.zeros(64, np.float32)),
             "s_action": up(np.full(32, -1, np.int32)), "s_reward": up(np.zeros(32, np.float32)),
             "s_done": up(np.zeros(32, np.float32)), "s_synthetic": up(np.zeros(32, np.uint8)),
             "leaves": up(np.zeros(32, np.float32)), "s_discount": up(np.zeros(32, np.float32)),
             "rstate": up(np.zeros(8, np.uint64)),
             "rlookback": up(np.zeros(4, np.uint64)), "counters": up(counters),
             "isv": up(isv)}  # fmt: skip
    KernelRuntime(backend, {}).bind(her.FORWARD)(
        **{k: dev[k] for k in ("f_entry", "f_exit_step", "f_actual", "f_env", "f_episode",
                               "f_h", "f_dir")},
        episode=up(np.zeros(len(mids), np.int32)), post_mid=up(mids),
        max_leaf=up(np.array([1.0], np.float32)), ring_state=up(ring_state), **store,
        W=W, R=8, H=2, mask=31, alpha_idx=5, gamma_idx=6, lot_mult_idx=7, threshold_idx=0,
        boost_idx=1, scale_idx=2, lookahead_idx=3, count_idx=4,
    )  # fmt: skip
    return {k: backend.download(v) for k, v in {**dev, **store}.items()}


def check_forward_table(backend: Backend) -> None:
    ring, mids = _ring(FORWARD_TABLE)
    out = run_forward(backend, ring, mids, head=len(FORWARD_TABLE))
    assert out["f_dir"].tolist()[: len(FORWARD_TABLE)] == [1, 0, 0, 0, 0, 0, 0]
    assert int(out["counters"][oracle.RING_TAIL]) == 0  # claim 0 still waits
    assert out["isv"][4] == 2 and int(out["counters"][oracle.FORWARD_TOTAL]) == 2
    # of the six due: four judged (two fired), one past 2 x lookahead, one in an ended episode
    fates = out["counters"][[oracle.JUDGED, oracle.EXPIRED, oracle.ENDED, oracle.OVERWRITTEN]]
    assert fates.tolist() == [4, 1, 1, 0]
    assert out["s_action"][:3].tolist() == [1, 1, -1]  # hold LONG for the two that fired
    assert out["s_reward"][:2].tolist() == [
        50.0,
        10.0,
    ]  # (20 - 10) * 10 * 0.5, (12 - 10) * 10 * 0.5
    assert out["s_h_t"][:4].tolist() == [2.0, 3.0, 12.0, 13.0]  # stored h of slots 1 and 6
    assert out["s_done"][:2].tolist() == [1.0, 1.0] and out["s_synthetic"][:3].tolist() == [1, 1, 0]
    assert out["s_discount"][:3].tolist() == [np.float32(0.9), np.float32(0.9), 0.0]


def test_forward_injects_after_lookahead() -> None:
    check_forward_table(NumpyBackend())


def check_forward_visits_the_oldest_live_claims_in_slot_order(backend: Backend) -> None:
    # claims 2 .. 9 live in slots 2 .. 7, 0, 1 (claim c in slot c mod 8), all due and paying;
    # the tail is at claim 5 and W = 4: claims 5, 6, 7, 8 are visited, in slot order 0, 5, 6, 7
    ring, mids = _ring([(5, 0, 1.0, 20.0 + k) for k in range(8)])
    out = run_forward(backend, ring, mids, head=10, tail=5, W=4)
    assert out["f_dir"].tolist() == [0, 1, 1, 1, 1, 0, 0, 0]  # slots 1-4 (claims 9, 2-4) stay
    assert int(out["counters"][oracle.RING_TAIL]) == 9 and out["isv"][4] == 4
    # the trades of slots 0, 5, 6, 7 in that order: reward (mid - 10) * 10 * 0.5
    assert out["s_reward"][:4].tolist() == [50.0, 75.0, 80.0, 85.0]
    assert out["s_h_t"][:8].tolist() == [0.0, 1.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0]
    # the next step starts at claim 9 (slot 1); an older claim than head - R is overwritten
    again = run_forward(backend, ring, mids, head=13, tail=2, W=8)
    assert int(again["counters"][oracle.RING_TAIL]) == 13 and again["isv"][4] == 8


def test_forward_visits_the_oldest_live_claims_in_slot_order() -> None:
    check_forward_visits_the_oldest_live_claims_in_slot_order(NumpyBackend())


def check_forward_fates(backend: Backend, ring: str, lookaheads: tuple[int, ...],
                        audit: bool = False, B: int = 64) -> dict[str, int]:  # fmt: skip
    """Random trading of B envs under her=forward for 20 steps at each lookahead of
    `lookaheads` in turn (the ISV slot changed between them); every claim the ring was given
    is accounted for: judged, expired, ended, overwritten or still live. Returns the totals."""
    env, replay, hs, _, isv = build(
        backend, wave_book(T=300),
        [f"env.num_envs={B}", "her=forward", "her.threshold=0.0", "her.lookahead=4",
         f"her.closed_ring={ring}", "replay.capacity_log2=15"],
    )  # fmt: skip
    gen = np.random.default_rng(B)
    run = Stepper(env, replay, hs, audit=audit)
    at = int(isv.layout.index("her_forward_lookahead"))
    for lookahead in lookaheads:
        values = isv.read()
        values[at] = lookahead
        backend.write(isv.array, values)
        for _ in range(20):
            run.step(gen.choice([FLAT, LONG, SHORT], size=B, p=[0.3, 0.35, 0.35]))
    assert not {k: v for k, v in run.mismatches.items() if v}, run.mismatches
    totals = hs.totals()
    live = int((run.her_state("f_dir") != 0).sum())
    fates = sum(totals[k] for k in ("judged", "expired", "ended", "overwritten"))
    assert totals["closes"] > 0 and totals["closes"] == fates + live
    return totals


def test_a_ring_too_small_for_one_lookahead_counts_what_it_lost() -> None:
    # 64 envs close ~25 trades a step: the 64-slot ring keeps about 2.5 steps of a 4-step wait
    totals = check_forward_fates(NumpyBackend(), "64", (4,))
    assert totals["overwritten"] > totals["closes"] // 2 and totals["expired"] == 0


def test_the_auto_ring_loses_nothing_and_a_longer_wait_expires_claims() -> None:
    # lookahead 4 -> 12 -> 4 (the ring of 512 sized for 4 holds the ~13 steps of closes of 12):
    # claims made during the long wait are older than 2 x 4 when it ends
    totals = check_forward_fates(NumpyBackend(), "auto", (4, 12, 4))
    assert totals["overwritten"] == 0 and totals["expired"] > 0 and totals["judged"] > 0


def test_forward_ring_smaller_than_the_envs_is_refused() -> None:
    match = r"her\.closed_ring=8 is smaller than env\.num_envs=9.*>= 16"
    with pytest.raises(ConfigError, match=match):
        build(NumpyBackend(), wave_book(), ["env.num_envs=9", "her.closed_ring=8"])


def check_many_closes_in_one_step(backend: Backend, B: int = 5000) -> None:
    # a replay large enough for B synthetic rows, every one in its own slot
    env, replay, hs, _, _ = build(backend, wave_book(T=200), [f"env.num_envs={B}",
                                  "her.threshold=0.0", "replay.capacity_log2=14",
                                  "her.closed_ring=8192"])  # fmt: skip
    env.reset(np.full(B, 2))
    run_ = Stepper(env, replay, hs)
    run_.step(np.full(B, LONG))
    for _ in range(5):
        run_.step(np.full(B, LONG))
    head = int(replay.read_state()[0])
    run_.step(np.full(B, FLAT))  # all B trades close in the same step, all beat threshold 0
    assert float(hs.isv.values("her_inject_count")[0]) == B
    state = replay.read_state()
    assert int(state[0]) == head + 2 * B  # B real rows, then B synthetic ones
    synthetic = backend.download(replay.arrays["s_synthetic"])
    slots = (head + B + np.arange(B)) % replay.cfg.capacity
    assert synthetic[slots].all() and synthetic.sum() == B
    assert hs.totals()["backward"] == B


def test_many_closes_in_one_step_across_blocks() -> None:
    check_many_closes_in_one_step(NumpyBackend())


class CountingBackend(NumpyBackend):
    """Counts the bytes every allocation asks for."""

    allocated = 0

    def alloc(self, shape, dtype):
        arr = super().alloc(shape, dtype)
        CountingBackend.allocated += arr.nbytes
        return arr

    def zeros(self, shape, dtype):
        arr = super().zeros(shape, dtype)
        CountingBackend.allocated += arr.nbytes
        return arr


def test_her_off_allocates_and_launches_nothing() -> None:
    sizes, launches, her_bytes = {}, {}, 0
    for variant in ("'off'", "'on'"):
        CountingBackend.allocated = 0
        env, replay, hs, runtime, _ = build(
            CountingBackend(), wave_book(), [f"her={variant}", "++her.closed_ring=256"]
        )
        run = Stepper(env, replay, hs)
        for _ in range(5):
            run.step(np.full(env.num_envs, LONG))
        sizes[variant], launches[variant] = CountingBackend.allocated, runtime.launch_counts()
        if hs is not None:
            her_bytes = sum(arr.nbytes for arr in hs.arrays.values())
    her_kernels = {"her_track", "her_inject", "her_forward"}
    assert not her_kernels & set(launches["'off'"]), launches["'off'"]
    assert {k: launches["'on'"][k] for k in her_kernels} == dict.fromkeys(her_kernels, 5)
    assert her_bytes > 0 and sizes["'off'"] == sizes["'on'"] - her_bytes


@pytest.mark.slow
def test_after_10k_steps_injections_appear_on_done_steps() -> None:
    be = NumpyBackend()
    env, replay, hs, _, isv = build(be, wave_book(T=400), ["env.num_envs=8", "her.lookahead=20",
                                    "replay.capacity_log2=12"])  # fmt: skip
    gen = np.random.default_rng(0)
    run = Stepper(env, replay, hs)
    fired_without_close = 0
    for _ in range(10_000):
        run.step(gen.choice([FLAT, LONG, SHORT], size=8, p=[0.2, 0.4, 0.4]))
        count = float(isv.values("her_inject_count")[0])
        if count > 0 and not be.download(env.arrays["done"]).any():
            fired_without_close += 1
    totals = hs.totals()
    assert totals["steps"] == 10_000 and totals["backward"] > 0 and totals["forward"] > 0
    assert fired_without_close == 0


def test_her_config() -> None:
    assert HerConfig.from_cfg(compose_train(["her='off'"])[0]) is None
    assert HerConfig.from_cfg(compose_train(["her=backward"])[0]) == HerConfig(
        HerVariant.BACKWARD, 1.5, 3.0, 0, 0
    )
    with pytest.raises(ConfigError, match=r"her\.closed_ring=100 must be a whole number that is"):
        HerConfig.from_cfg(compose_train(["her.closed_ring=100"])[0])


@pytest.mark.parametrize(
    ("overrides", "ring"),
    [(["env.num_envs=4096"], 262_144),  # 4096 x 51 = 208,896
     (["env.num_envs=65536"], 4_194_304),  # 65536 x 51 = 3,342,336
     (["env.num_envs=64", "her.lookahead=3"], 256),  # 64 x 4: a power of two already
     (["env.num_envs=1", "her.lookahead=1"], 2)],
)  # fmt: skip
def test_the_auto_ring_holds_every_close_of_one_lookahead(overrides: list[str], ring: int) -> None:
    cfg = HerConfig.from_cfg(compose_train(overrides)[0])
    assert cfg is not None and (cfg.closed_ring, cfg.ring_auto) == (ring, True)
    assert cfg.max_overwritten == 0.01
    fixed = HerConfig.from_cfg(compose_train([*overrides, "her.closed_ring=1024"])[0])
    assert fixed is not None and (fixed.closed_ring, fixed.ring_auto) == (1024, False)


def test_the_resolved_ring_is_recorded() -> None:
    plan = plan_run(compose_train(["debug=tiny"])[0])
    assert plan.resolved_params()["her.closed_ring_resolved"] == 64  # 8 envs x (5 + 1) -> 64
    assert (
        "her.closed_ring_resolved"
        not in plan_run(compose_train(["debug=tiny", "her=backward"])[0]).resolved_params()
    )


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("her.threshold=-1.5", r"her\.threshold=-1\.5 must be a number >= 0"),
        ("her.priority_boost=0.5", r"her\.priority_boost=0\.5 must be a number >= 1"),
        ("her.lookahead=0", r"her\.lookahead=0 must be a whole number >= 1 \(env steps\)"),
        ("her.lookahead=2.5", r"her\.lookahead=2\.5 must be a whole number"),
        ("her.backward=1", r"her\.backward=1 must be true or false"),
        (
            "her.closed_ring=big",
            r"her\.closed_ring='big' must be a whole number that is a power "
            r"of two, or auto",
        ),
        ("her.max_overwritten=1.5", r"her\.max_overwritten=1\.5 must be a number in \[0, 1\]"),
    ],
)
def test_her_settings_out_of_range_are_refused_naming_the_key(override: str, match: str) -> None:
    cfg, _ = compose_train([override])
    with pytest.raises(ConfigError, match=match):
        plan_run(cfg)
