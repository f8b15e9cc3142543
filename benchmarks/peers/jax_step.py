"""The JAX peer: the reference training step (torch_eager.py) as one jitted `lax.scan`.

    python benchmarks/peers/jax_step.py [--envs 4096 65536] [--precision float32 tf32]
                                        [--check] [--log2 20] [--json jax_step.json]

The work per env step is that of torch_eager.Peer.step, with static shapes: perceive (the same
features and frozen tanh projection), epsilon-greedy act, the env update, HER peak tracking, the
ring record of the closed trades, HER forward rows judged over the whole ring, one PER push of the
B real rows, the HER backward rows and the forward rows, then one learning step (PER sample of
BATCH rows, IS weights, double-DQN Huber loss, global-norm clipping to 10, Adam with torch's
defaults, new priorities, a hard target sync every TARGET_PERIOD steps). A variable number of
rows becomes a masked write: the rows that fire get their slots in order by a prefix sum, the
others distinct indices past the array, whose updates XLA drops (`mode="drop"`,
`unique_indices=True`: no write, no conflicts). A transition is one row of the replay (h, h2, a,
r, d: ROW floats) and a closed trade one row of the ring, so a step writes the replay in one
scatter of rows and one of priorities (the three pushes' rows concatenated, their slots those
of three pushes in turn), the ring in one, and a batch is one gather. HER forward judges only
the entries closed LOOKAHEAD steps ago (each comes due once): a step's closes take one run of
ring slots, whose start and length the step keeps for LOOKAHEAD steps, so the due entries are
one gather of B slots, not a scan of the ring; the ring holds B x (LOOKAHEAD + 1) closes
(`ring_for`), so none is overwritten before it is judged. PER sampling draws BATCH i.i.d.
uniforms (not stratified), as torch.multinomial with replacement does, and finds them in two
levels of prefix sums (the sums of GROUPS groups, then the drawn groups' rows) rather than one
over N; a row drawn twice keeps its last draw's new priority.

Precision: float32 runs the matmuls in full float32 (jax.default_matmul_precision("float32"));
tf32 leaves JAX's default, which on the GPU is TF32. Timing: one call runs 100 steps; after the
compile and 3 calls, the median over 7 calls (jax.block_until_ready, time.perf_counter).
--check first runs `check` (the jitted scan against the step called op by op); --log2 shrinks
the replay for a CPU run.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable
from itertools import pairwise
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.peers.common import (
    ADAM_EPS,
    ALPHA,
    B1,
    B2,
    BATCH,
    BETA,
    BOOST,
    CLIP,
    EPS_END,
    EPS_STEPS,
    FEE,
    GAMMA,
    HIDDEN,
    HORIZONS,
    LOG2,
    LOOKAHEAD,
    LOT_MULT,
    LR,
    REPEATS,
    STEPS,
    TARGET_PERIOD,
    THRESHOLD,
    A,
    H,
    arguments,
    book,
    report,
    ring_for,
)  # fmt: skip

f32, i32 = jnp.float32, jnp.int32
Params = tuple[tuple[jax.Array, jax.Array], ...]  # (w [in, out], b [out]) per layer


class Book(NamedTuple):
    """Best quotes relative to the first mid (float32 [T]) and sizes (float32 [T, L])."""

    bid: jax.Array
    ask: jax.Array
    mid: jax.Array
    bsz: jax.Array
    asz: jax.Array
    tick: float
    T: int


class Env(NamedTuple):
    cursor: jax.Array  # int32 [B] tick index
    pos: jax.Array  # int32 [B] in {-1, 0, 1}
    entry: jax.Array  # float32 [B] fill price of the open trade (0 when flat)
    peak: jax.Array  # float32 [B] best mid in the trade's favour
    tlen: jax.Array  # float32 [B] steps the trade has been open


class Learner(NamedTuple):
    params: Params
    target: Params
    m: Params  # Adam first moments
    v: Params  # Adam second moments
    count: jax.Array  # int32 scalar: Adam steps


class Replay(NamedTuple):
    rows: jax.Array  # float32 [N, ROW]: h [H], h2 [H], a, r, d of each transition (one row)
    prio: jax.Array  # float32 [N] priority^alpha (0: never written)
    head: jax.Array  # int32 scalar: rows pushed (folded into [N, 2N) once full)
    max_p: jax.Array  # float32 scalar
    claim: jax.Array  # int32 [N] -1; in an update, the last batch position that drew the row


class Her(NamedTuple):
    ring: jax.Array  # float32 [R, 4 + H]: entry, dir, actual, env, then h at the close
    r_step: jax.Array  # int32 [R] step of the close (-1: empty); R = ring_for(B)
    r_head: jax.Array  # int32 scalar, in [0, R)
    closed: jax.Array  # int32 [LOOKAHEAD, 2]: step t's closes (first slot, count) at t % LOOKAHEAD


ROW = 2 * H + 3  # a replay row: h, h2, a, r, d
R_ENTRY, R_DIR, R_ACTUAL, R_ENV, R_H = 0, 1, 2, 3, 4  # a ring row's columns (h from R_H)


class State(NamedTuple):
    env: Env
    learner: Learner
    replay: Replay
    her: Her
    t: jax.Array  # int32 scalar: steps taken
    key: jax.Array  # PRNG key


def load_book() -> Book:
    """The synthetic book every peer trades (common.book) as device arrays."""
    bk = book()
    dev = {k: jnp.asarray(bk[k], f32) for k in ("bid", "ask", "mid", "bsz", "asz")}
    return Book(dev["bid"], dev["ask"], dev["mid"], dev["bsz"], dev["asz"], float(bk["tick"]),
                int(bk["T"]))  # fmt: skip


def init_mlp(key: jax.Array) -> Params:
    """H -> HIDDEN -> HIDDEN -> A, drawn like nn.Linear: w and b ~ U(+-1/sqrt(fan_in))."""
    layers = []
    for (fan_in, fan_out), k in zip(
        pairwise((H, HIDDEN, HIDDEN, A)), jax.random.split(key, 3), strict=True
    ):
        bound, (k_w, k_b) = 1.0 / math.sqrt(fan_in), jax.random.split(k)
        w = jax.random.uniform(k_w, (fan_in, fan_out), f32, -bound, bound)
        layers.append((w, jax.random.uniform(k_b, (fan_out,), f32, -bound, bound)))
    return tuple(layers)


def mlp(params: Params, x: jax.Array) -> jax.Array:
    """Q-values float32 [n, A] of x float32 [n, H] (ReLU between the layers)."""
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def perceive(book: Book, proj: jax.Array, env: Env) -> jax.Array:
    """h float32 [B, H]: horizon returns, spread, imbalances, position, PnL, peak distance, age."""
    c, hz = env.cursor, jnp.asarray(HORIZONS, i32)
    rets = book.mid[c][:, None] - book.mid[jnp.maximum(c[:, None] - hz, 0)]
    rets = rets / book.tick / jnp.sqrt(hz.astype(f32))
    spread = (book.ask[c] - book.bid[c]) / book.tick - 1
    b0, a0 = book.bsz[c, 0], book.asz[c, 0]
    bs, as_ = book.bsz[c].sum(1), book.asz[c].sum(1)
    d = env.pos.astype(f32)
    pnl = d * (book.mid[c] - env.entry) / book.tick / 20.0
    peak = d * (env.peak - book.mid[c]) / book.tick / 20.0
    rest = [spread, (b0 - a0) / (b0 + a0), (bs - as_) / (bs + as_), d, pnl, peak, env.tlen / 100.0]
    return jnp.tanh(jnp.concatenate([rets, jnp.stack(rest, 1)], 1) @ proj)


def act(params: Params, h: jax.Array, t: jax.Array, key: jax.Array) -> jax.Array:
    """Epsilon-greedy actions int32 [B], eps = max(EPS_END, 1 - t / EPS_STEPS)."""
    k_explore, k_action = jax.random.split(key)
    greedy = jnp.argmax(mlp(params, h), 1).astype(i32)
    explore = jax.random.uniform(k_explore, greedy.shape) < jnp.maximum(
        EPS_END, 1.0 - t / EPS_STEPS
    )
    return jnp.where(explore, jax.random.randint(k_action, greedy.shape, 0, A, i32), greedy)


def trade(book: Book, env: Env, a: jax.Array) -> tuple[Env, dict[str, jax.Array]]:
    """The env update for actions a [B]: the new Env and closing [B] bool, actual, peak_pnl,
    reward [B] float32 (PnL of a close minus FEE; FEE more at an open)."""
    c, pos, d = env.cursor, env.pos, env.pos.astype(f32)
    target = jnp.asarray([0, 1, -1], i32)[a]
    change = target != pos
    closing = change & (pos != 0)
    exit_px = jnp.where(pos > 0, book.bid[c], book.ask[c])
    actual = jnp.where(closing, d * (exit_px - env.entry) * LOT_MULT - FEE, 0.0)
    peak_pnl = jnp.where(closing, d * (env.peak - env.entry) * LOT_MULT, 0.0)
    opening = change & (target != 0)
    fill = jnp.where(target > 0, book.ask[c], book.bid[c])
    new = Env(
        cursor=jnp.where(c + 1 >= book.T - 1, max(HORIZONS), c + 1),
        pos=target,
        entry=jnp.where(opening, fill, jnp.where(change, 0.0, env.entry)),
        peak=jnp.where(opening, book.mid[c], env.peak),
        tlen=jnp.where(change, 0.0, env.tlen + (pos != 0)),
    )
    reward = actual - jnp.where(opening, FEE, 0.0)
    return new, dict(closing=closing, actual=actual, peak_pnl=peak_pnl, reward=reward)


def track(book: Book, env: Env) -> Env:
    """HER track: the peak follows the mid in the open trade's favour."""
    m = book.mid[env.cursor]
    short = jnp.where(env.pos < 0, jnp.minimum(env.peak, m), env.peak)
    return env._replace(peak=jnp.where(env.pos > 0, jnp.maximum(env.peak, m), short))


OUT = 1 << 30  # past every array: a scatter with mode="drop" skips OUT + i


def slots(fire: jax.Array, head: jax.Array, size: int) -> tuple[jax.Array, jax.Array]:
    """Slots int32 [n]: the rows where fire, in order from head (mod size); OUT + i (dropped,
    and every index unique) for the others. Also the number of rows that fire."""
    n = jnp.cumsum(fire.astype(i32))
    skip = OUT + jnp.arange(fire.shape[0], dtype=i32)
    return jnp.where(fire, (head + n - 1) % size, skip), n[-1]


def write(array: jax.Array, idx: jax.Array, values: jax.Array) -> jax.Array:
    """array.at[idx].set(values) for unique idx, those past the end dropped."""
    return array.at[idx].set(values, mode="drop", unique_indices=True)


def push(rp: Replay, fire: jax.Array, rows: jax.Array, p: jax.Array) -> Replay:
    """Push the rows [n, ROW] where fire, with priorities p [n], at head: one scatter of whole
    rows and one of priorities."""
    N = rp.prio.shape[0]
    idx, n = slots(fire, rp.head, N)
    head = rp.head + n  # folded into [N, 2N) once the buffer is full: no int32 overflow
    return rp._replace(rows=write(rp.rows, idx, rows), prio=write(rp.prio, idx, p),
                       head=jnp.where(head >= 2 * N, head - N, head))  # fmt: skip


def replay_rows(h, h2, a, r, d) -> jax.Array:
    """Rows float32 [n, ROW] of transitions (h, h2 [n, H]; a, r, d [n])."""
    cols = [x.astype(f32)[:, None] for x in (a, r, d)]
    return jnp.concatenate([h, h2, *cols], 1)


def remember(book: Book, s: State, env: Env, h, h2, a, tr) -> tuple[Replay, Her, dict]:
    """The ring record of the closes, HER forward and backward, then one PER push of the B real
    rows, the backward rows and the forward rows, in that order."""
    rp, her, closing = s.replay, s.her, tr["closing"]
    B = closing.shape[0]
    boost = (BOOST * rp.max_p) ** ALPHA
    peak_pnl = tr["peak_pnl"]
    fire = closing & (peak_pnl > 0) & (peak_pnl > THRESHOLD * tr["actual"])
    # --- ring record of the closed trades (one scatter of whole rows) ---
    R = her.r_step.shape[0]
    idx, n = slots(closing, her.r_head, R)
    env_id = jnp.arange(B, dtype=f32)
    record = jnp.stack([s.env.entry, s.env.pos.astype(f32), tr["actual"], env_id], 1)
    ring = write(her.ring, idx, jnp.concatenate([record, h], 1))
    r_step = write(her.r_step, idx, jnp.broadcast_to(s.t, (B,)))
    # --- HER forward: the closes of step t - LOOKAHEAD (their slots are one run from the head
    # of then), those not overwritten since ---
    at = s.t % LOOKAHEAD
    first, count = her.closed[at, 0], her.closed[at, 1]
    lane = jnp.arange(B, dtype=i32)
    j = (first + lane) % R
    due = (lane < count) & (r_step[j] == s.t - LOOKAHEAD)
    entry = ring[j]
    r_dir = entry[:, R_DIR]
    fwd = r_dir * (book.mid[env.cursor[entry[:, R_ENV].astype(i32)]] - entry[:, R_ENTRY]) * LOT_MULT
    ffire = due & (fwd > 0) & (fwd > THRESHOLD * entry[:, R_ACTUAL])
    closed = her.closed.at[at].set(jnp.stack([her.r_head, n]))
    her = Her(ring=ring, r_step=r_step, r_head=(her.r_head + n) % R, closed=closed)
    h_f = entry[:, R_H:]
    rows = jnp.concatenate([
        replay_rows(h, h2, a, tr["reward"], closing),
        replay_rows(h, h, a, peak_pnl, jnp.ones(B, f32)),
        replay_rows(h_f, h_f, jnp.where(r_dir > 0, 1, 2), fwd, jnp.ones(B, f32)),
    ])  # fmt: skip
    fires = jnp.concatenate([jnp.ones(B, bool), fire, ffire])
    p = jnp.concatenate([jnp.full(B, rp.max_p**ALPHA), jnp.full(2 * B, boost)])
    rp = push(rp, fires, rows, p)
    return rp, her, dict(closes=closing.sum(), back=fire.sum(), fwd=ffire.sum())


def td_loss(params: Params, target: Params, h, a, r, d, h2, w) -> tuple[jax.Array, jax.Array]:
    """IS-weighted mean double-DQN Huber loss (delta 1) and td [BATCH] float32."""
    q = jnp.take_along_axis(mlp(params, h), a[:, None], 1)[:, 0]
    best = jnp.argmax(mlp(params, h2), 1)
    nxt = jnp.take_along_axis(mlp(target, h2), best[:, None], 1)[:, 0]
    td = jax.lax.stop_gradient(r + GAMMA * (1 - d) * nxt) - q
    huber = jnp.where(jnp.abs(td) < 1.0, 0.5 * td * td, jnp.abs(td) - 0.5)
    return jnp.mean(w * huber), td


def adam(ln: Learner, grads: Params) -> Learner:
    """Global-norm clipping (torch's clip_grad_norm_) and one torch.optim.Adam step."""
    norm = jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree.leaves(grads)))
    grads = jax.tree.map(lambda g: g * jnp.minimum(CLIP / (norm + 1e-6), 1.0), grads)
    count = ln.count + 1
    m = jax.tree.map(lambda m, g: B1 * m + (1 - B1) * g, ln.m, grads)
    v = jax.tree.map(lambda v, g: B2 * v + (1 - B2) * g * g, ln.v, grads)
    step, root = LR / (1 - B1 ** count.astype(f32)), jnp.sqrt(1 - B2 ** count.astype(f32))
    params = jax.tree.map(
        lambda p, m, v: p - step * m / (jnp.sqrt(v) / root + ADAM_EPS), ln.params, m, v
    )
    return ln._replace(params=params, m=m, v=v, count=count)


GROUPS = 1024  # PER samples in two levels: a group of N / GROUPS rows, then a row in it


def sample(prio: jax.Array, size: jax.Array, key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """BATCH rows drawn i.i.d. with probability prio / sum(prio) over prio [N] (N a multiple of
    GROUPS), clipped to the size - 1 rows filled, and that sum. Two levels of prefix sums: the
    groups' sums, then the rows of each drawn group (BATCH x N / GROUPS), not one over N."""
    N = prio.shape[0]
    groups = prio.reshape(GROUPS, N // GROUPS)
    g_sum = groups.sum(1)
    g_cdf = jnp.cumsum(g_sum)
    total = g_cdf[-1]
    u = jax.random.uniform(key, (BATCH,)) * total
    g = jnp.minimum(jnp.searchsorted(g_cdf, u, side="right").astype(i32), GROUPS - 1)
    rest = u - (g_cdf[g] - g_sum[g])  # u's place inside group g
    within = jnp.sum(jnp.cumsum(groups[g], 1) <= rest[:, None], 1).astype(i32)
    row = g * (N // GROUPS) + jnp.minimum(within, N // GROUPS - 1)
    return jnp.minimum(row, size - 1), total


def learn(ln: Learner, rp: Replay, t: jax.Array, key: jax.Array) -> tuple[Learner, Replay, dict]:
    """PER sample (two levels of prefix sums), loss, Adam, new priorities, target sync."""
    N = rp.prio.shape[0]
    size = jnp.minimum(rp.head, N)
    idx, total = sample(rp.prio, size, key)
    w = (size * (rp.prio[idx] / total)) ** -BETA
    batch = rp.rows[idx]  # one gather of whole rows
    h, h2 = batch[:, :H], batch[:, H : 2 * H]
    a, r, d = batch[:, 2 * H].astype(i32), batch[:, 2 * H + 1], batch[:, 2 * H + 2]
    rows = h, a, r, d, h2
    grad = jax.value_and_grad(td_loss, has_aux=True)
    (loss, td), grads = grad(ln.params, ln.target, *rows, w / w.max())
    ln = adam(ln, grads)
    sync = t % TARGET_PERIOD == 0
    ln = ln._replace(target=jax.tree.map(lambda o, g: jnp.where(sync, o, g), ln.params, ln.target))
    # a row drawn more than once keeps its last draw's priority (as the kernels do): each
    # position claims its row, the highest claim wins, and the claims are cleared after
    lane = jnp.arange(BATCH, dtype=i32)
    claim = rp.claim.at[idx].max(lane)
    last = claim[idx] == lane
    new = jnp.abs(td) + 1e-6
    prio = write(rp.prio, jnp.where(last, idx, OUT + lane), new**ALPHA)
    max_p = jnp.maximum(rp.max_p, jnp.max(jnp.where(last, new, 0.0)))
    rp = rp._replace(prio=prio, max_p=max_p, claim=claim.at[idx].set(-1))
    return ln, rp, dict(loss=loss)


def step(book: Book, proj: jax.Array, s: State) -> tuple[State, dict[str, jax.Array]]:
    """One env step and one learning step; also the loss and the closes and HER rows pushed."""
    key, k_act, k_learn = jax.random.split(s.key, 3)
    h = perceive(book, proj, s.env)
    a = act(s.learner.params, h, s.t, k_act)
    env, tr = trade(book, s.env, a)
    h2 = perceive(book, proj, env)
    env = track(book, env)
    rp, her, pushed = remember(book, s, env, h, h2, a, tr)
    learner, rp, out = learn(s.learner, rp, s.t, k_learn)
    return State(env, learner, rp, her, s.t + 1, key), out | pushed


def _precision(precision: str) -> contextlib.AbstractContextManager:
    if precision == "float32":
        return jax.default_matmul_precision("float32")
    if precision == "tf32":
        return contextlib.nullcontext()
    raise ValueError(f"precision={precision!r}: choose float32 or tf32")


def make(B: int, *, seed: int = 0, precision: str = "float32", log2: int = LOG2):
    """The initial State of B envs over N = 2^log2 replay rows, and its step function."""
    _precision(precision)
    book, N = load_book(), 1 << log2
    if N % GROUPS:
        raise ValueError(f"N = 2^{log2} replay rows: PER's two levels need a multiple of {GROUPS}")
    k_cursor, k_proj, k_q, key = jax.random.split(jax.random.key(seed), 4)
    proj = jax.random.normal(k_proj, (11, H), f32) / 3.0
    params = init_mlp(k_q)
    moment = jax.tree.map(jnp.zeros_like, params)
    zero = jnp.asarray(0, i32)
    cursor = jax.random.randint(k_cursor, (B,), max(HORIZONS), book.T - 2, i32)
    env = Env(cursor=cursor, pos=jnp.zeros(B, i32), entry=jnp.zeros(B, f32),
              peak=jnp.zeros(B, f32), tlen=jnp.zeros(B, f32))  # fmt: skip
    replay = Replay(rows=jnp.zeros((N, ROW), f32), prio=jnp.zeros(N, f32), head=zero,
                    max_p=jnp.asarray(1.0, f32), claim=jnp.full(N, -1, i32))  # fmt: skip
    R = ring_for(B)
    her = Her(ring=jnp.zeros((R, R_H + H), f32), r_step=jnp.full(R, -1, i32), r_head=zero,
              closed=jnp.zeros((LOOKAHEAD, 2), i32))  # fmt: skip
    learner = Learner(params=params, target=params, m=moment, v=moment, count=zero)
    state = State(env, learner, replay, her, zero, key)
    state = jax.tree.map(jnp.copy, state)  # params and target: separate buffers, both donated

    def step_fn(s: State) -> tuple[State, dict[str, jax.Array]]:
        with _precision(precision):
            return step(book, proj, s)

    return state, step_fn


def runner(step_fn: Callable) -> Callable[[State, int], tuple[State, dict]]:
    """run(state, n): n steps in one jitted lax.scan, the state donated; returns the new state
    and the per-step outputs ([n] each)."""

    def run(state: State, n: int) -> tuple[State, dict]:
        return jax.lax.scan(lambda s, _: step_fn(s), state, None, length=n)

    return jax.jit(run, static_argnums=1, donate_argnums=0)


# --- self-check: the jitted scan against the step function called op by op ---


def _host(state: State) -> dict[str, np.ndarray]:
    flat = jax.tree_util.tree_flatten_with_path(state)[0]
    fix = lambda x: jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x  # noqa: E731
    return {jax.tree_util.keystr(p): np.asarray(fix(x)) for p, x in flat}


def _assert_same(got: dict, want: dict, rtol: float = 1e-2) -> None:
    """Integer leaves equal, float leaves within rtol of the leaf's largest magnitude (on the GPU
    XLA fuses and orders the float sums differently under jit than op by op: parameters 3.5e-5
    apart after one step, losses 1.4e-3 after five)."""
    for name, w in want.items():
        g = got[name]
        if np.issubdtype(w.dtype, np.floating):
            bad = np.abs(g - w) > rtol * max(float(np.abs(w).max(initial=0.0)), 1e-30)
        else:
            bad = g != w
        if np.any(bad):
            i = np.unravel_index(np.argmax(bad), bad.shape)
            raise AssertionError(f"{name}[{i}]: jit {g[i]} vs op by op {w[i]} ({bad.sum()} differ)")


def check(B: int = 256, precision: str = "float32", log2: int = LOG2, steps: int = 5) -> str:
    """Run `steps` steps jitted (what is timed) from a warm state; raise if a part of the jitted
    step did nothing or miscounted, and, on the CPU, if its first step's env, HER ring and replay
    rows differ from the step called op by op. XLA orders float sums differently under jit than
    op by op (on the CPU too), so a PER draw near a row's boundary can take its neighbour, and
    the learner's state and priorities part from the first update: those, and on the GPU
    everything, are checked only by the jitted run's own accounting. Returns a one-line
    summary."""
    state, step_fn = make(B, precision=precision, log2=log2)
    N, init, run = 1 << log2, _host(state), runner(step_fn)
    state, out0 = run(state, 1)
    first = _host(state)
    for name in (n for n in first if n.startswith(".learner.params")):
        tgt = name.replace("params", "target", 1)
        assert np.array_equal(first[tgt], first[name]), f"{tgt} not synced at t = 0"
        assert not np.array_equal(first[name], init[name]), f"{name} unchanged by the first step"
    state, out1 = run(state, LOOKAHEAD + 5)  # closed trades become due: HER forward fires
    start, h0 = _host(state), int(state.replay.head)
    eager, eager_out = step_fn(jax.tree.map(jnp.copy, state))
    state, jit_first = run(state, 1)
    if jax.default_backend() == "cpu":  # (jitted, op by op) after one step, before learning
        learned = (".learner", ".replay.prio", ".replay.max_p", ".replay.claim", ".key", "loss")
        acted = lambda name: not name.startswith(learned)  # noqa: E731
        both = [{k: v for k, v in d.items() if acted(k)} for d in (_host(state), _host(eager))]
        _assert_same(*both)
        _assert_same({k: np.asarray(v)[0] for k, v in jit_first.items() if acted(k)},
                     {k: np.asarray(v) for k, v in eager_out.items() if acted(k)})  # fmt: skip
    state, jit_rest = run(state, steps - 1)
    jit_out = {k: np.concatenate([np.asarray(jit_first[k]), np.asarray(jit_rest[k])])
               for k in jit_first}  # fmt: skip
    want = _host(state)  # the jitted run, checked below
    assert np.isfinite(jit_out["loss"]).all(), f"loss {jit_out['loss']}"
    back, fwd = int(jit_out["back"].sum()), int(jit_out["fwd"].sum())
    assert back > 0 and fwd > 0, f"no HER rows in the window (backward {back}, forward {fwd})"
    head = h0 + steps * B + back + fwd
    head = head if head < 2 * N else (head - N) % N + N
    assert int(want[".replay.head"]) == head, f"head {int(want['.replay.head'])}, not {head}"
    prio, rows = want[".replay.prio"], min(head, N)
    assert (prio[:N] > 0).sum() == rows, "a pushed row has no priority"
    t = int(want[".t"])  # pushes give at most 2 priorities a step: the rest are learned ones
    assert len(np.unique(prio[:rows])) > 2 * t, "priorities not rewritten from |td|"
    if h0 + steps * B + back + fwd <= N:  # nothing overwritten yet: every done row accounted for
        counts = [out0, out1, jit_out]
        done = sum(int(np.sum(o[k])) for o in counts for k in ("closes", "back", "fwd"))
        assert want[".replay.rows"][:, 2 * H + 2].sum() == done, "done rows"
    for name in (n for n in want if n.startswith(".learner.params")):
        assert not np.allclose(want[name], start[name]), f"{name} unchanged over the window"
    losses = ", ".join(f"{x:.4g}" for x in jit_out["loss"])
    same = "the first jit == op by op" if jax.default_backend() == "cpu" else "jit"
    return (
        f"check B={B} {precision} N=2^{log2}: {steps} steps {same} from t={t - steps}; "
        f"head {h0} -> {head} ({steps}x{B} real + {back} HER backward + {fwd} HER forward); "
        f"losses {losses}"
    )


# --- timing ---


def measure(B: int, precision: str = "float32", log2: int = LOG2) -> float:
    """Median µs per step over REPEATS calls of a STEPS-step scan, after the compile and 3 calls
    (common.median_us's numbers, in whole scans)."""
    state, step_fn = make(B, precision=precision, log2=log2)
    run = runner(step_fn)
    for _ in range(4):
        state, _ = jax.block_until_ready(run(state, STEPS))
    samples = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        state, _ = jax.block_until_ready(run(state, STEPS))
        samples.append((time.perf_counter() - t0) * 1e6 / STEPS)
    return statistics.median(samples)


def main() -> None:
    args = arguments(__doc__)
    log2 = LOG2
    for p in args.precision:
        print(check(256, p, log2))
    print(f"JAX {jax.__version__} on {jax.devices()[0].device_kind}, N = 2^{log2}")
    rows = [{"peer": "jax_step", "envs": b, "precision": p, "us": measure(b, p, log2)}
            for p in args.precision for b in args.envs]  # fmt: skip
    report(rows, args.json)


if __name__ == "__main__":
    main()
