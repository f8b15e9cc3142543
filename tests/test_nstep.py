"""n-step returns (agent.n_step): the accumulator's ledger by hand, its push, and runs with it
(the same kernel on the cuda backend in tests/kernels/test_nstep.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from alpha_rl.backend.base import Backend
from alpha_rl.backend.numpy import NumpyBackend
from alpha_rl.errors import ConfigError
from alpha_rl.kernels import nstep
from alpha_rl.kernels.per import HEAD
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.nstep import NStep, OneStep, allocate
from alpha_rl.pipeline.life import checkpoint
from alpha_rl.replay import Replay, ReplayConfig
from tests.her_scenarios import FLAT, LONG, build, wave_book
from tests.pipeline.test_run import history, job, theta

B, H, N, GAMMA = 2, 2, 3, 0.5
# env 0 closes a trade at step 3; step 4 is env 1's episode's last, flat (a truncation: done 0)
REWARDS = np.array([[1, 2, 4, 8, 16, 32], [10, 20, 30, 40, 50, 60]], np.float32)
DONE = np.zeros((2, 6), np.float32)
DONE[0, 3] = 1
EPISODE = np.zeros((2, 6), np.int32)
EPISODE[1, 4:] = 1


def h(t: int, b: int) -> list[float]:
    return [100.0 * b + t, -(100.0 * b + t)]


def action(t: int, b: int) -> int:
    return (t + b) % 3


def run_ledger(backend: Backend) -> list[dict[int, tuple]]:
    """Steps 0..5 of the scripted envs; per step, row -> (h_t, h_tp1, action, R, done, discount)
    of every flagged row."""
    up, down = backend.upload, backend.download
    state, staged = allocate(backend, B, H, N)
    dev = {**state, **staged}
    kernel = KernelRuntime(backend, {}).bind(nstep.ACCUMULATE)
    isv = up(np.array([7.0, GAMMA, 7.0], np.float32))  # gamma at isv[1]
    steps = []
    for t in range(6):
        kernel(h_t=up(np.array([h(t, b) for b in range(B)], np.float32).ravel()),
               h_tp1=up(np.array([h(t + 1, b) for b in range(B)], np.float32).ravel()),
               eff_action=up(np.array([action(t, b) for b in range(B)], np.int32)),
               reward=up(REWARDS[:, t].copy()), done=up(DONE[:, t].copy()),
               episode=up(EPISODE[:, t].copy()), isv=isv, **dev, B=B, H=H, n=N,
               gamma_idx=1)  # fmt: skip
        out = {k: down(v) for k, v in dev.items()}
        rows = {}
        for row in np.flatnonzero(out["flags"]):
            scalars = (float(out[k][row]) for k in ("out_reward", "out_done", "out_discount"))
            rows[int(row)] = (out["out_h_t"].reshape(-1, H)[row].tolist(),
                              out["out_h_tp1"].reshape(-1, H)[row].tolist(),
                              int(out["out_action"][row]), *scalars)  # fmt: skip
        steps.append(rows)
    return steps


# by hand, gamma 0.5, n 3: (state step s, end step t + 1, action of s, R, done, gamma^k)
LEDGER = [
    {},
    {},
    {0: (h(0, 0), h(3, 0), action(0, 0), 1 + 0.5 * 2 + 0.25 * 4, 0.0, 0.125),
     3: (h(0, 1), h(3, 1), action(0, 1), 10 + 0.5 * 20 + 0.25 * 30, 0.0, 0.125)},
    # env 0 closes: its three held steps, oldest first, cut at the close (done 1)
    {0: (h(1, 0), h(4, 0), action(1, 0), 2 + 0.5 * 4 + 0.25 * 8, 1.0, 0.125),
     1: (h(2, 0), h(4, 0), action(2, 0), 4 + 0.5 * 8, 1.0, 0.25),
     2: (h(3, 0), h(4, 0), action(3, 0), 8, 1.0, 0.5),
     3: (h(1, 1), h(4, 1), action(1, 1), 20 + 0.5 * 30 + 0.25 * 40, 0.0, 0.125)},
    # env 0 starts afresh (nothing held); env 1's truncation flushes its steps 2 and 3, ending
    # at step 3 and bootstrapping from h_4, its episode's last state (h_5 is the next episode's
    # first), done 0; step 4's own transition is dropped
    {3: (h(2, 1), h(4, 1), action(2, 1), 30 + 0.5 * 40, 0.0, 0.25),
     4: (h(3, 1), h(4, 1), action(3, 1), 40, 0.0, 0.5)},
    {},
]  # fmt: skip


def check_ledger(backend: Backend) -> None:
    got = run_ledger(backend)
    for t, (rows, want) in enumerate(zip(got, LEDGER, strict=True)):
        assert rows == want, f"step {t}"


def test_the_n_step_ledger_across_a_close_and_an_episode_end() -> None:
    check_ledger(NumpyBackend())


def check_break_ledger(backend: Backend, n: int) -> None:
    """A session break at tick 15 and two envs from tick 9; step k acts at tick 9 + k, and step
    4 (tick 13, whose next tick ends the session) is the episode's last. Env 0 opens a long and
    holds it: the forced close there is terminal (done 1) and stored. Env 1 stays flat: its last
    step is a truncation, never stored, and no row of it bootstraps from the next episode.
    Every row the replay holds after the five steps, in push order, by hand: (h_t, next state,
    action, return, done, discount)."""
    book = wave_book(T=30, breaks=(15,))
    env, _, _, runtime, isv = build(
        backend, book, ["env.num_envs=2", "her='off'", "agent.gamma=0.9"]
    )
    replay = Replay(ReplayConfig(10, 0.6, 0.4, 1000, 1e-6, 32), env.obs_dim, runtime, 0, 2 * n,
                    isv, discounts=n > 1)  # fmt: skip
    push = NStep(n, env, runtime, isv) if n > 1 else OneStep(env)
    env.reset(np.array([9, 9]))
    H, down = env.obs_dim, backend.download
    h_t, h_tp1 = backend.zeros(2 * H, np.float32), backend.zeros(2 * H, np.float32)
    seen: dict[str, list] = {"h_t": [], "h_tp1": [], "eff_action": [], "reward": [], "done": []}
    for _ in range(5):
        env.perceive(h_t)
        env.step(backend.upload(np.array([LONG, FLAT], np.int32)))
        env.perceive(h_tp1)
        push.push(h_t, h_tp1, replay)
        seen["h_t"].append(down(h_t).reshape(2, H).copy())
        seen["h_tp1"].append(down(h_tp1).reshape(2, H).copy())
        for k in ("eff_action", "reward", "done"):
            seen[k].append(down(env.arrays[k]).copy())
    obs, nxt, act, rew, done = (np.array(seen[k]) for k in seen)  # [step, env, ...]
    assert done.tolist() == [[0, 0]] * 4 + [[1, 0]], "env 0's close at the last step only"
    assert down(env.arrays["episode"]).tolist() == [1, 1] and down(env.arrays["stored"])[1] == 0
    g = np.float32(0.9)

    def row(b: int, s: int, last: int, to: np.ndarray) -> tuple:
        """Env b's return of steps s..last (Horner from the newest), bootstrapping from `to`."""
        ret = rew[last, b]
        for i in range(last - 1, s - 1, -1):
            ret = np.float32(rew[i, b] + np.float32(g * ret))
        discount = np.float32(1)
        for _ in range(last - s + 1):
            discount = np.float32(discount * g)
        ends = float(done[last, b])
        return obs[s, b].tolist(), to.tolist(), int(act[s, b]), float(ret), ends, float(discount)

    if n == 1:  # each step's row for each env but env 1's truncation; one step, discount gamma
        want = [row(b, k, k, nxt[k, b]) for k in range(4) for b in (0, 1)]
        want.append(row(0, 4, 4, nxt[4, 0]))
        for k in range(4):  # a row that bootstraps does so from its own episode's next state
            np.testing.assert_array_equal(nxt[k], obs[k + 1])
    else:  # n = 3: full windows at steps 2 and 3; at step 4 env 0's close ends its last three
        # (done 1), env 1's truncation ends its steps 2 and 3 at h_4 (done 0) and drops step 4
        want = [row(b, k - 2, k, nxt[k, b]) for k in (2, 3) for b in (0, 1)]
        want += [row(0, s, 4, nxt[4, 0]) for s in (2, 3, 4)]
        want += [row(1, s, 3, obs[4, 1]) for s in (2, 3)]
    a, filled = replay.arrays, int(replay.read_state()[HEAD])
    assert filled == len(want)
    stored = {k: down(v) for k, v in a.items() if k.startswith("s_")}
    states = stored["s_h_t"].reshape(-1, H), stored["s_h_tp1"].reshape(-1, H)
    discounts = stored["s_discount"] if n > 1 else np.full(filled, g)
    got = [(states[0][i].tolist(), states[1][i].tolist(), int(stored["s_action"][i]),
            float(stored["s_reward"][i]), float(stored["s_done"][i]), float(discounts[i]))
           for i in range(filled)]  # fmt: skip
    assert "s_discount" in a if n > 1 else "s_discount" not in a  # n = 1: the learner's gamma
    for i, (have, expect) in enumerate(zip(got, want, strict=True)):
        assert have == expect, f"n = {n}, row {i}"
    if n > 1:
        assert down(push.arrays["count"]).tolist() == [0, 0]  # the next episodes start empty


@pytest.mark.parametrize("n", [1, 3])
def test_a_session_break_ends_each_row_in_its_own_session_by_hand(n: int) -> None:
    check_break_ledger(NumpyBackend(), n)


@pytest.mark.slow
def test_n_step_runs_train_resume_bit_exact_and_store_their_discounts(tmp_path: Path) -> None:
    over = ["agent.n_step=3", "replay.beta_anneal_updates=29", "agent.gamma=0.9"]
    whole = job(tmp_path, over, "whole")
    half = job(tmp_path, [*over, "steps=20"], "half")
    resumed = job(tmp_path, [*over, f"resume={half.run_dir}"], "ignored")
    assert whole.status == resumed.status == "FINISHED"
    assert history(tmp_path, half.run_id, "loss/l_q") == history(tmp_path, whole.run_id, "loss/l_q")
    np.testing.assert_array_equal(theta(half.run_dir), theta(whole.run_dir))
    with np.load(checkpoint.latest(whole.run_dir) / "state.npz", allow_pickle=False) as npz:
        held = npz["nstep.count"]
        discount, synthetic = npz["replay.s_discount"], npz["replay.s_synthetic"]
        filled = npz["replay.leaves"] > 0
    assert held.max() <= 2  # at most n - 1 steps wait between steps
    g = np.float32(0.9)
    powers = {g, np.float32(g * g), np.float32(np.float32(g * g) * g)}
    assert set(discount[filled & (synthetic == 0)].tolist()) <= {float(x) for x in powers}
    assert len(set(discount[filled & (synthetic == 0)].tolist())) == 3  # k = 1, 2 and 3 all occur
    assert set(discount[filled & (synthetic == 1)].tolist()) <= {float(g)}  # HER: one step


def test_n_step_below_one_is_refused_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"agent\.n_step=0 must be a whole number >= 1"):
        job(tmp_path, ["agent.n_step=0"])


def test_learning_before_the_first_n_step_transition_is_refused(tmp_path: Path) -> None:
    match = r"agent\.learn_start=0 is less than agent\.n_step - 1 = 2.*agent\.learn_start >= 2"
    with pytest.raises(ConfigError, match=match):
        job(tmp_path, ["agent.n_step=3", "agent.learn_start=0"])
    assert job(tmp_path, ["agent.n_step=3", "agent.learn_start=2", "steps=12"]).status == "FINISHED"


def test_the_end_of_the_data_flushes_every_env_and_the_next_episode_starts_empty() -> None:
    """Env 0 holds a long to the data's end (the forced close: done 1), env 1 stays flat (a
    truncation: done 0); n = 3, so each held 3 steps when the episode ended. Env 0's three end at
    the close; env 1's first two end the step before and bootstrap from its last state, h_t."""

    be = NumpyBackend()
    book = wave_book(T=30)
    env, _, _, runtime, isv = build(be, book, ["env.num_envs=2", "her='off'", "agent.gamma=0.9"])
    replay = Replay(ReplayConfig(10, 0.6, 0.4, 1000, 1e-6, 32), env.obs_dim, runtime, 0, 6, isv,
                    discounts=True)  # fmt: skip
    acc = NStep(3, env, runtime, isv)
    env.reset(np.array([book.T - 6, book.T - 6]))
    h_t, h_tp1 = be.zeros(2 * env.obs_dim, np.float32), be.zeros(2 * env.obs_dim, np.float32)
    flagged = []
    for _ in range(5):  # ticks T-6 .. T-2: the fifth step is the episode's last
        env.perceive(h_t)
        env.step(be.upload(np.array([LONG, 0], np.int32)))
        env.perceive(h_tp1)
        acc.push(h_t, h_tp1, replay)
        flagged.append(be.download(acc.staged["flags"]).reshape(2, 3).sum(axis=1).tolist())
    assert flagged == [[0, 0], [0, 0], [1, 1], [1, 1], [3, 2]]
    assert be.download(env.arrays["episode"]).tolist() == [1, 1]
    assert be.download(acc.arrays["count"]).tolist() == [0, 0]  # the new episode starts empty
    done = be.download(acc.staged["out_done"]).reshape(2, 3)
    discount = be.download(acc.staged["out_discount"]).reshape(2, 3)
    assert done[0].tolist() == [1, 1, 1] and done[1, :2].tolist() == [0, 0]
    g = np.float32(0.9)
    assert discount[0].tolist() == [np.float32(np.float32(g * g) * g), np.float32(g * g), g]
    assert discount[1, :2].tolist() == [np.float32(g * g), g]
    next_state = be.download(acc.staged["out_h_tp1"]).reshape(2, 3, -1)
    # env 0's rows may reach the new episode's first observation (done 1: never bootstrapped);
    # env 1's bootstrap from the last state of its own episode, not from h_tp1
    np.testing.assert_array_equal(
        next_state[0], np.tile(be.download(h_tp1).reshape(2, -1)[0], (3, 1))
    )
    np.testing.assert_array_equal(
        next_state[1, :2], np.tile(be.download(h_t).reshape(2, -1)[1], (2, 1))
    )
    assert int(replay.read_state()[0]) == 2 + 2 + 5
