"""Oracle of cuda/per.cu: prioritized replay push, sum-tree rebuild, sampling, priority update.

The kernels' header states the contract; this file reproduces it operation for operation:
slots in row order at the write head; tree levels summed in the kernel's order (four strided
adds per thread, then halving 256 -> 1); the sampling descent with its per-lane sums,
Hillis-Steele scan of the lanes and in-lane scan, all in float32, so the same leaves are drawn.
Only powf (leaf values, importance weights) may differ from alpha_rl.portable's power by an
ulp.
"""

from __future__ import annotations

import numpy as np

from alpha_rl.abi import PER
from alpha_rl.portable import power
from alpha_rl.reference.rng import Stream, rng_uniform

F32 = np.float32
# the launch constants of cuda/per.cu (a test checks they agree)
FANOUT, PUSH_BLOCK, REDUCE_BLOCK, SAMPLE_BLOCK, UPDATE_BLOCK, MAX_BATCH = (
    PER[f"PER_{k}"]
    for k in ("FANOUT", "PUSH_BLOCK", "REDUCE_BLOCK", "SAMPLE_BLOCK", "UPDATE_BLOCK", "MAX_BATCH")
)
LANES = 32  # a warp
HEAD, TAG, TICKET, SAMPLE_EPOCH, SAMPLE_DONE, STATUS = (
    PER[f"PER_{k}"] for k in ("HEAD", "TAG", "TICKET", "SAMPLE_EPOCH", "SAMPLE_DONE", "STATUS")
)
STATUS_EMPTY_SAMPLE, STATE_WORDS = PER["PER_STATUS_EMPTY_SAMPLE"], PER["PER_STATE_WORDS"]


def tree_layout(capacity: int) -> tuple[np.ndarray, int]:
    """(layout [1 + 2 * levels] int32, total tree entries) of the internal levels for N leaves."""
    sizes, size = [], capacity
    while True:
        size = -(-size // FANOUT)
        sizes.append(size)
        if size == 1:
            break
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    layout = [len(sizes)] + [int(v) for pair in zip(offsets, sizes, strict=True) for v in pair]
    return np.array(layout, dtype=np.int32), int(sum(sizes))


def new_leaf(max_leaf: np.ndarray) -> np.float32:
    """Leaf of a new transition without a given priority: the current max (1 when it is 0)."""
    m = F32(max_leaf[0])
    return m if m > 0 else F32(1)


def claim(flag: np.ndarray, state: np.ndarray, lookback: np.ndarray, block: int) -> np.ndarray:
    """What per_push_claim gives each row: head + flagged rows before it (-1 when not flagged).
    Advances state[HEAD] and state[TAG] and writes the look-back words as the kernel does."""
    n = len(flag)
    head = int(state[HEAD])
    claims = np.where(flag, head + np.cumsum(flag) - flag, -1).astype(np.int64)
    tag = (int(state[TAG]) + 1) & 0x7FFFFFFF  # PER_TAG_MASK
    counts = np.add.reduceat(flag.astype(np.int64), np.arange(0, n, block)) if n else []
    inclusive = np.cumsum(counts).astype(np.uint64)
    lookback[: len(inclusive)] = (np.uint64(tag) << np.uint64(32)) | inclusive
    state[HEAD] = np.uint64(head + int(np.count_nonzero(flag)))
    state[TAG] = state[TAG] + np.uint64(1)
    return claims


def write_rows(rows, slots, h_t, h_tp1, H, s_h_t, s_h_tp1) -> None:
    """Copy state rows `rows` of h_t / h_tp1 ([*, H]) into storage slots `slots`."""
    s_h_t.reshape(-1, H)[slots] = h_t.reshape(-1, H)[rows]
    s_h_tp1.reshape(-1, H)[slots] = h_tp1.reshape(-1, H)[rows]


def boosted_leaf(max_leaf: np.ndarray, boost: float, alpha: float) -> np.float32:
    """Leaf of a synthetic transition: boost^alpha times the new-transition leaf."""
    base = new_leaf(max_leaf)
    return base if boost == 1 else power(F32(boost), F32(alpha)) * base


def per_push(
    flags, h_t, h_tp1, action, reward, done, priority, discount, max_leaf, isv,
    s_h_t, s_h_tp1, s_action, s_reward, s_done, s_synthetic, leaves, s_discount, slot_out, state,
    lookback, n, H, mask, alpha_idx, synthetic,
) -> None:  # fmt: skip
    """Push the flagged rows r < n at slots (head + flagged rows before r) & mask, in place
    (alpha at isv[alpha_idx])."""
    n, H, alpha = int(n), int(H), F32(isv[alpha_idx])
    if n <= 0:
        return
    flag = np.ones(n, bool) if flags is None else flags[:n] != 0
    slots = claim(flag, state, lookback, PUSH_BLOCK) & int(mask)
    if slot_out is not None:
        slot_out[:n] = np.where(flag, slots, -1)
    rows = np.flatnonzero(flag)
    dst = slots[rows]
    write_rows(rows, dst, h_t, h_tp1, H, s_h_t, s_h_tp1)
    s_action[dst], s_reward[dst], s_done[dst] = action[rows], reward[rows], done[rows]
    s_synthetic[dst] = 1 if synthetic else 0
    if s_discount is not None:
        s_discount[dst] = discount[rows]
    if priority is None:
        leaves[dst] = new_leaf(max_leaf)
    else:
        leaves[dst] = power(priority[rows].astype(F32), F32(alpha))


def per_tree_reduce(in_sum, in_max, out_sum, out_max, n_in, n_out) -> None:
    """out[j] = sum and max of in[j*F .. j*F + F) in the kernel's order (see module docstring)."""
    n_in, n_out = int(n_in), int(n_out)
    children = np.zeros(n_out * FANOUT, F32)
    maxima = np.zeros(n_out * FANOUT, F32)
    children[:n_in] = in_sum[:n_in]
    maxima[:n_in] = (in_sum if in_max is None else in_max)[:n_in]
    grouped = children.reshape(n_out, FANOUT // REDUCE_BLOCK, REDUCE_BLOCK)
    grouped_max = maxima.reshape(n_out, FANOUT // REDUCE_BLOCK, REDUCE_BLOCK)
    acc = np.zeros((n_out, REDUCE_BLOCK), F32)
    for k in range(FANOUT // REDUCE_BLOCK):
        acc = acc + grouped[:, k, :]
    top = np.max(grouped_max, axis=1)
    width = REDUCE_BLOCK // 2
    while width:
        acc[:, :width] = acc[:, :width] + acc[:, width : 2 * width]
        width //= 2
    out_sum[:n_out] = acc[:, 0]
    out_max[:n_out] = top.max(axis=1)


def _blocks(children: np.ndarray, n_child: int, node: np.ndarray) -> np.ndarray:
    """[m, LANES, 32] float32: the FANOUT children of each node (0 past n_child)."""
    whole = n_child // FANOUT
    table = children[: whole * FANOUT].reshape(whole, LANES, 32)
    rest = np.zeros((2, LANES, 32), F32)  # the part-filled block, then one past every child
    rest.reshape(2, FANOUT)[0, : n_child - whole * FANOUT] = children[whole * FANOUT : n_child]
    vals = np.empty((len(node), LANES, 32), F32)
    inside = node < whole
    vals[inside] = table[node[inside]]
    vals[~inside] = rest[np.minimum(node[~inside] - whole, 1)]
    return vals


def _in_order(first: np.ndarray, terms: np.ndarray) -> np.ndarray:
    """[m, 33] float32: first, then first + terms[:, 0], then + terms[:, 1], ... one by one, as
    a lane adds its values."""
    run = np.empty((terms.shape[0], terms.shape[1] + 1), F32)
    run[:, 0] = first
    for j in range(terms.shape[1]):
        np.add(run[:, j], terms[:, j], out=run[:, j + 1])
    return run


def _descend(children: np.ndarray, n_child: int, node: np.ndarray, u: np.ndarray):
    """(child, running sum before it) for each sample, as one warp of the kernel finds them."""
    m = len(node)
    nodes, which = np.unique(node, return_inverse=True)  # samples share nodes near the root
    blocks = _blocks(children, n_child, nodes)
    lane_sums = blocks[:, :, 0].copy()  # each lane's 32 values added one by one, as its loop
    for j in range(1, 32):
        np.add(lane_sums, blocks[:, :, j], out=lane_sums)
    lane_sum = lane_sums[which]
    inclusive = lane_sum.copy()
    offset = 1
    while offset < LANES:
        shifted = inclusive.copy()
        shifted[:, offset:] = inclusive[:, :-offset] + inclusive[:, offset:]
        inclusive = shifted
        offset *= 2
    exclusive = np.concatenate([np.zeros((m, 1), F32), inclusive[:, :-1]], axis=1)
    positive = lane_sum > 0
    hit = (u[:, None] < inclusive) & positive
    last_positive = LANES - 1 - np.argmax(positive[:, ::-1], axis=1)
    chosen = np.where(hit.any(axis=1), np.argmax(hit, axis=1), last_positive)
    rows = np.arange(m)
    lane_vals = blocks[which, chosen, :]
    # run[:, j] is the running sum before value j of the chosen lane, run[:, j + 1] after it
    run = _in_order(exclusive[rows, chosen], lane_vals)
    pos = lane_vals > 0
    first = pos & (u[:, None] < run[:, 1:])
    last = np.where(pos.any(axis=1), 31 - np.argmax(pos[:, ::-1], axis=1), -1)
    pick = np.where(first.any(axis=1), np.argmax(first, axis=1), last)
    before = np.where(pick >= 0, run[rows, np.maximum(pick, 0)], F32(0))
    return node * FANOUT + chosen * 32 + pick, before.astype(F32)


def _draw(leaves, tree, layout, frac, size, total) -> tuple[np.ndarray, np.ndarray]:
    """Indices and probabilities of the samples at fractions `frac` of the total."""
    levels = int(layout[0])
    u = frac * total
    node = np.zeros(len(frac), np.int64)
    for level in range(levels, 0, -1):
        if level == 1:
            children, n_child = leaves, len(leaves)
        else:
            offset, n_child = int(layout[2 * level - 3]), int(layout[2 * level - 2])
            children = tree[offset : offset + n_child]
        node, before = _descend(children, n_child, node, u)
        u = u - before
    return node.astype(np.int32), leaves[node] / total


def per_sample(
    leaves, tree, layout, run_seed, indices, weights, probs, state, isv,
    M, N, schedule_idx, beta_idx,
) -> None:  # fmt: skip
    """M stratified draws, u_i = (i + U_i) / M * total, with normalised IS weights (in place;
    beta0 and the updates beta anneals over at isv[schedule_idx + k])."""
    M, N = int(M), int(N)
    beta0, anneal = isv[schedule_idx], isv[schedule_idx + 1]
    size = min(int(state[HEAD]), N)
    epoch = int(state[SAMPLE_EPOCH])
    total = F32(tree[int(layout[2 * int(layout[0]) - 1])])
    i = np.arange(M, dtype=np.uint64)
    U = rng_uniform(int(run_seed[0]), Stream.PER, np.uint64(epoch * M) + i)
    frac = (i.astype(F32) + U) / F32(M)
    if size == 0:
        idx, p = np.full(M, -1, np.int32), np.zeros(M, F32)
    elif not total > 0:
        idx = np.minimum(size - 1, (frac * F32(size)).astype(np.int32))
        p = np.full(M, F32(1) / F32(size), F32)
    else:
        idx, p = _draw(leaves[:N], tree, layout, frac, size, total)
    indices[:M], probs[:M] = idx, p
    beta = min(F32(1), F32(beta0) + (F32(1) - F32(beta0)) * (F32(epoch) / F32(anneal)))
    if size == 0:
        weights[:M] = 0
        state[STATUS] = state[STATUS] | np.uint64(STATUS_EMPTY_SAMPLE)
    else:
        w_max = power(F32(size) * p.min(), -beta)
        weights[:M] = power(F32(size) * p, -beta) / w_max
    if beta_idx >= 0:
        isv[beta_idx] = beta
    state[SAMPLE_EPOCH] = np.uint64(epoch + 1)


def per_update(indices, delta, isv, leaves, max_leaf, M, alpha_idx, eps_idx) -> None:
    """leaves[i] = (|delta| + eps)^alpha (alpha, eps at isv[alpha_idx], isv[eps_idx]); a repeated
    index keeps its last occurrence's value; max_leaf is raised to the largest new value."""
    M, alpha, eps = int(M), isv[alpha_idx], isv[eps_idx]
    idx = indices[:M]
    last = np.zeros(M, bool)
    _, first_reversed = np.unique(idx[::-1], return_index=True)
    last[M - 1 - first_reversed] = True
    keep = last & (idx >= 0)
    values = power(np.abs(delta[:M]) + F32(eps), F32(alpha)).astype(F32)
    leaves[idx[keep]] = values[keep]
    if keep.any():
        max_leaf[0] = max(F32(max_leaf[0]), values[keep].max())
