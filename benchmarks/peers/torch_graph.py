"""The fair PyTorch peer: the reference step (common.py), static shapes, captured as a CUDA graph.

    python3 -m benchmarks.peers.torch_graph [--envs 4096 65536] [--precision float32 tf32]

What torch_eager does with dynamic shapes is done here with fixed ones, so that one step can be
captured by `torch.cuda.graph` and replayed: the compacted pushes (HER backward rows, the ring
record, HER forward rows) write every candidate row, a row that does not fire to a dump row past
the end (its priority stays 0, so it is never sampled); the counters (head, max priority, step)
are device tensors; PER samples by prefix sum + searchsorted (i.i.d. draws, as
torch.multinomial with replacement); the target sync every 1000 steps is a `torch.where` on the
step; Adam is `capturable`. torch_compile.py compiles this same step.
"""

from __future__ import annotations

import itertools

import torch
from torch import nn

from benchmarks.peers.common import (
    ALPHA,
    BATCH,
    BETA,
    BOOST,
    CLIP,
    EPS_END,
    EPS_STEPS,
    FEE,
    GAMMA,
    HORIZONS,
    LOG2,
    LOOKAHEAD,
    LOT_MULT,
    LR,
    RING,
    TARGET_PERIOD,
    THRESHOLD,
    A,
    H,
    arguments,
    median_us,
    report,
)  # fmt: skip
from benchmarks.peers.torch_eager import Market, q_networks, set_precision


class StaticPeer(Market):
    """State and static-shape step of the reference peer on one CUDA device."""

    def __init__(self, B: int, dev: torch.device, log2: int = LOG2) -> None:
        super().__init__(B, dev)
        torch.manual_seed(0)  # the default generator: the one a CUDA graph can replay
        lo = max(HORIZONS)
        self.cursor = torch.randint(lo, self.T - 2, (B,), device=dev)
        z = lambda n, dt=torch.float32: torch.zeros(n, dtype=dt, device=dev)  # noqa: E731
        self.pos, self.entry, self.peak, self.tlen = z(B, torch.long), z(B), z(B), z(B)
        self.proj = torch.randn(11, H, device=dev) / 3.0
        self.targets = torch.tensor([0, 1, -1], device=dev)
        self.q, self.q_target = q_networks(dev)
        self.opt = torch.optim.Adam(self.q.parameters(), lr=LR, capturable=True)
        N = 1 << log2
        self.N = N  # storage rows 0..N-1 plus the dump row N
        self.s_h, self.s_h2 = z((N + 1, H)), z((N + 1, H))
        self.s_a, self.s_r, self.s_d, self.prio = z(N + 1, torch.long), z(N + 1), z(N + 1), z(N + 1)
        self.r_entry, self.r_dir, self.r_actual = z(RING + 1), z(RING + 1), z(RING + 1)
        self.r_step = torch.full((RING + 1,), -1.0, device=dev)
        self.r_h, self.r_env = z((RING + 1, H)), z(RING + 1, torch.long)
        self.head, self.r_head = z((), torch.long), z((), torch.long)
        self.max_p, self.t = torch.ones((), device=dev), z((), torch.long)
        self.arange_b = torch.arange(B, device=dev)
        self.loss = z(())

    def push(self, fire, h, h2, a, r, d, prio) -> None:
        """The rows where `fire`, in row order at the head; the others go to the dump row."""
        rank = torch.cumsum(fire.long(), 0) - 1
        idx = torch.where(fire, (self.head + rank) % self.N, self.N)
        self.s_h[idx], self.s_h2[idx], self.s_a[idx], self.s_r[idx], self.s_d[idx] = h, h2, a, r, d
        self.prio[idx] = torch.where(fire, prio, 0.0)
        self.head += fire.long().sum()

    def step(self) -> None:
        B, c, dev = self.B, self.cursor, self.dev
        h = self.perceive()
        with torch.no_grad():
            greedy = self.q(h).argmax(1)
        eps = torch.clamp(1.0 - self.t.float() / EPS_STEPS, min=EPS_END)
        explore = torch.rand(B, device=dev) < eps
        a = torch.where(explore, torch.randint(0, A, (B,), device=dev), greedy)
        target = self.targets[a]
        change = target != self.pos
        closing = change & (self.pos != 0)
        exit_px = torch.where(self.pos > 0, self.bid[c], self.ask[c])
        actual = torch.where(
            closing, self.pos.float() * (exit_px - self.entry) * LOT_MULT - FEE, 0.0
        )
        peak_pnl = torch.where(closing, self.pos.float() * (self.peak - self.entry) * LOT_MULT, 0.0)
        opening = change & (target != 0)
        fill = torch.where(target > 0, self.ask[c], self.bid[c])
        reward = actual - torch.where(opening, FEE, 0.0)
        closed_dir, closed_entry = self.pos.float(), self.entry.clone()
        self.entry.copy_(torch.where(opening, fill, torch.where(change, 0.0, self.entry)))
        self.peak.copy_(torch.where(opening, self.mid[c], self.peak))
        self.tlen.copy_(torch.where(change, 0.0, self.tlen + (self.pos != 0).float()))
        self.pos.copy_(target)
        self.cursor.copy_(torch.where(c + 1 >= self.T - 1, max(HORIZONS), c + 1))
        h2 = self.perceive()
        m = self.mid[self.cursor]
        short = torch.where(self.pos < 0, torch.minimum(self.peak, m), self.peak)
        self.peak.copy_(torch.where(self.pos > 0, torch.maximum(self.peak, m), short))
        # PER push of the real rows, HER backward, the ring record, HER forward
        every = torch.ones(B, dtype=torch.bool, device=dev)
        self.push(every, h, h2, a, reward, closing.float(), (self.max_p**ALPHA).expand(B))
        fire = closing & (peak_pnl > 0) & (peak_pnl > THRESHOLD * actual)
        boost = (BOOST * self.max_p) ** ALPHA
        ones = torch.ones(B, device=dev)
        self.push(fire, h, h, a, peak_pnl, ones, boost.expand(B))
        slot = torch.where(closing, (self.r_head + torch.cumsum(closing.long(), 0) - 1) % RING,
                           RING)  # fmt: skip
        self.r_entry[slot], self.r_dir[slot], self.r_actual[slot] = closed_entry, closed_dir, actual
        self.r_h[slot], self.r_step[slot] = h, torch.where(closing, self.t.float(), -1.0)
        self.r_env[slot] = self.arange_b
        self.r_head += closing.long().sum()
        due = (self.r_step >= 0) & ((self.t.float() - self.r_step) >= LOOKAHEAD)
        fwd = self.r_dir * (self.mid[self.cursor[self.r_env]] - self.r_entry) * LOT_MULT
        ffire = due & (fwd > 0) & (fwd > THRESHOLD * self.r_actual)
        ring_ones = torch.ones(RING + 1, device=dev)
        self.push(ffire, self.r_h, self.r_h, torch.where(self.r_dir > 0, 1, 2), fwd, ring_ones,
                  boost.expand(RING + 1))  # fmt: skip
        self.r_step.copy_(torch.where(due, -1.0, self.r_step))
        self.learn()
        self.t += 1

    def learn(self) -> None:
        """PER sample (prefix sum + searchsorted), double-DQN Huber, Adam, new priorities."""
        size = torch.clamp(self.head, max=self.N).float()
        cum = torch.cumsum(self.prio[: self.N], 0)
        total = cum[-1]
        u = torch.rand(BATCH, device=self.dev) * total
        idx = torch.searchsorted(cum, u, right=True).clamp(max=self.N - 1)
        probs = self.prio[idx] / total
        w = (size * probs) ** -BETA
        w = w / w.max()
        q = self.q(self.s_h[idx]).gather(1, self.s_a[idx, None]).squeeze(1)
        with torch.no_grad():
            best = self.q(self.s_h2[idx]).argmax(1, keepdim=True)
            nxt = self.q_target(self.s_h2[idx]).gather(1, best).squeeze(1)
            y = self.s_r[idx] + GAMMA * (1 - self.s_d[idx]) * nxt
        td = y - q
        loss = (w * nn.functional.huber_loss(q, y, reduction="none")).mean()
        self.opt.zero_grad(set_to_none=False)
        loss.backward()
        nn.utils.clip_grad_norm_(self.q.parameters(), CLIP, foreach=True)
        self.opt.step()
        new = td.detach().abs() + 1e-6
        self.prio[idx] = new**ALPHA
        self.max_p.copy_(torch.maximum(self.max_p, new.max()))
        self.loss.copy_(loss.detach())
        sync = (self.t % TARGET_PERIOD) == 0
        with torch.no_grad():
            for p, tp in zip(self.q.parameters(), self.q_target.parameters(), strict=True):
                tp.copy_(torch.where(sync, p, tp))


def capture(peer: StaticPeer, warmup: int = 3) -> torch.cuda.CUDAGraph:
    """One step as a CUDA graph (after warm-up steps on a side stream, as torch requires)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            peer.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        peer.step()
    return graph


def sanity(peer: StaticPeer, advance, steps: int = 5) -> None:
    """`advance()` does the whole step: each call stores B real rows and the injections, the
    ring and the step count advance, the parameters move, the loss stays finite."""
    start = int(peer.t)
    before = [p.detach().clone() for p in peer.q.parameters()]
    heads = []
    for _ in range(steps):
        advance()
        torch.cuda.synchronize()
        heads.append(int(peer.head))
    assert int(peer.t) == start + steps, (int(peer.t), start)
    grown = [b - a for a, b in itertools.pairwise(heads)]
    assert all(g >= peer.B for g in grown), grown  # B real rows plus the injections, each step
    assert int(peer.r_head) > 0 and torch.isfinite(peer.loss)
    assert torch.isfinite(peer.prio).all() and int((peer.prio[: peer.N] > 0).sum()) > 0
    moved = any(not torch.equal(a, b) for a, b in zip(before, peer.q.parameters(), strict=True))
    assert moved, "the learner did not update"


def check(B: int = 256, log2: int = 14) -> None:
    """The step run eagerly and replayed as a graph each pass the sanity checks."""
    dev = torch.device("cuda")
    eager = StaticPeer(B, dev, log2)
    sanity(eager, eager.step)
    graphed = StaticPeer(B, dev, log2)
    sanity(graphed, capture(graphed).replay)


def measure(B: int, precision: str) -> float:
    """Median µs per step of the graph replayed (common.median_us)."""
    set_precision(precision)
    peer = StaticPeer(B, torch.device("cuda"))
    graph = capture(peer)

    def run(n: int) -> None:
        for _ in range(n):
            graph.replay()

    return median_us(run, torch.cuda.synchronize)


def main() -> None:
    args = arguments(__doc__)
    check()
    rows = [{"peer": "torch_graph", "envs": B, "precision": precision, "us": measure(B, precision)}
            for precision in args.precision for B in args.envs]  # fmt: skip
    report(rows, args.json)


if __name__ == "__main__":
    main()
