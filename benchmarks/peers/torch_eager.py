"""The reference peer: the training step in eager PyTorch, as a researcher would first write it.

    python3 benchmarks/peers/torch_eager.py [--envs 4096 65536]

The semantics every peer shares are in common.py. Dynamic shapes (boolean-mask pushes,
torch.multinomial sampling, Python-side counters) keep it out of a CUDA graph: torch_graph.py is
the same step with static shapes.
"""

from __future__ import annotations

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
    HIDDEN,
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
    book,
    median_us,
    report,
)  # fmt: skip


class Market:
    """The book on a device and the observation of B envs over it (both torch peers). A subclass
    sets the envs' state (cursor, pos, entry, peak, tlen) and the frozen projection `proj`."""

    cursor: torch.Tensor
    pos: torch.Tensor
    entry: torch.Tensor
    peak: torch.Tensor
    tlen: torch.Tensor
    proj: torch.Tensor

    def __init__(self, B: int, dev: torch.device) -> None:
        bk = book()
        t = lambda x: torch.as_tensor(x, device=dev)  # noqa: E731
        self.bid, self.ask, self.mid = t(bk["bid"]), t(bk["ask"]), t(bk["mid"])
        self.bsz, self.asz = t(bk["bsz"]), t(bk["asz"])
        self.tick, self.T, self.B, self.dev = float(bk["tick"]), int(bk["T"]), B, dev
        self.horizons = torch.tensor(HORIZONS, device=dev)

    def perceive(self) -> torch.Tensor:
        """h [B, H]: horizon returns, spread, imbalances, position, PnL, peak distance, age."""
        c = self.cursor
        rets = self.mid[c][:, None] - self.mid[(c[:, None] - self.horizons).clamp(min=0)]
        rets = rets / self.tick / self.horizons.float().sqrt()
        spread = (self.ask[c] - self.bid[c]) / self.tick - 1
        b0, a0 = self.bsz[c, 0], self.asz[c, 0]
        imb0 = (b0 - a0) / (b0 + a0)
        imb = (self.bsz[c].sum(1) - self.asz[c].sum(1)) / (self.bsz[c].sum(1) + self.asz[c].sum(1))
        d = self.pos.float()
        pnl = d * (self.mid[c] - self.entry) / self.tick / 20.0
        peak = d * (self.peak - self.mid[c]) / self.tick / 20.0
        age = self.tlen / 100.0
        feats = torch.cat([rets, torch.stack([spread, imb0, imb, d, pnl, peak, age], 1)], 1)
        return torch.tanh(feats @ self.proj)


def q_networks(dev: torch.device) -> tuple[nn.Module, nn.Module]:
    """The online MLP H -> HIDDEN -> HIDDEN -> A and its target, equal at the start."""
    mlp = lambda: nn.Sequential(nn.Linear(H, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN),  # noqa: E731
                                nn.ReLU(), nn.Linear(HIDDEN, A)).to(dev)  # fmt: skip
    q, q_target = mlp(), mlp()
    q_target.load_state_dict(q.state_dict())
    return q, q_target


class Peer(Market):
    """State and step of the PyTorch peer on one device."""

    def __init__(self, B: int, dev: torch.device) -> None:
        super().__init__(B, dev)
        g = torch.Generator(device=dev).manual_seed(0)
        self.g = g
        lo = max(HORIZONS)
        self.cursor = torch.randint(lo, self.T - 2, (B,), device=dev, generator=g)
        z = lambda dt=torch.float32: torch.zeros(B, dtype=dt, device=dev)  # noqa: E731
        self.pos, self.entry, self.peak, self.tlen = z(torch.long), z(), z(), z()
        self.proj = torch.randn(11, H, device=dev, generator=g) / 3.0
        self.q, self.q_target = q_networks(dev)
        self.opt = torch.optim.Adam(self.q.parameters(), lr=LR)
        N = 1 << LOG2
        self.N, self.head, self.max_p = N, 0, 1.0
        self.s_h, self.s_h2 = torch.zeros(N, H, device=dev), torch.zeros(N, H, device=dev)
        self.s_a, self.s_r = (
            torch.zeros(N, dtype=torch.long, device=dev),
            torch.zeros(N, device=dev),
        )
        self.s_d, self.prio = torch.zeros(N, device=dev), torch.zeros(N, device=dev)
        self.r_entry, self.r_dir = torch.zeros(RING, device=dev), torch.zeros(RING, device=dev)
        self.r_actual, self.r_step = (
            torch.zeros(RING, device=dev),
            torch.full((RING,), -1, device=dev),
        )
        self.r_h = torch.zeros(RING, H, device=dev)
        self.r_env = torch.zeros(RING, dtype=torch.long, device=dev)
        self.r_head, self.t = 0, 0

    def push(self, h, h2, a, r, d, prio) -> None:
        n = h.shape[0]
        idx = (self.head + torch.arange(n, device=self.dev)) % self.N
        self.s_h[idx], self.s_h2[idx], self.s_a[idx], self.s_r[idx], self.s_d[idx] = h, h2, a, r, d
        self.prio[idx] = prio
        self.head += n

    def step(self) -> None:
        B, c = self.B, self.cursor
        h = self.perceive()
        # --- act ---
        with torch.no_grad():
            greedy = self.q(h).argmax(1)
        eps = max(EPS_END, 1.0 - self.t / EPS_STEPS)
        explore = torch.rand(B, device=self.dev, generator=self.g) < eps
        a = torch.where(explore, torch.randint(0, A, (B,), device=self.dev, generator=self.g),
                        greedy)  # fmt: skip
        target = torch.tensor([0, 1, -1], device=self.dev)[a]
        # --- env ---
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
        self.entry = torch.where(opening, fill, torch.where(change, 0.0, self.entry))
        self.peak = torch.where(opening, self.mid[c], self.peak)
        self.tlen = torch.where(change, 0.0, self.tlen + (self.pos != 0).float())
        self.pos = target
        self.cursor = torch.where(c + 1 >= self.T - 1, torch.full_like(c, max(HORIZONS)), c + 1)
        h2 = self.perceive()
        # --- HER track (peak in the trade's favour) ---
        m = self.mid[self.cursor]
        short = torch.where(self.pos < 0, torch.minimum(self.peak, m), self.peak)
        self.peak = torch.where(self.pos > 0, torch.maximum(self.peak, m), short)
        # --- PER push, HER backward, ring record, HER forward ---
        done = closing.float()
        self.push(h, h2, a, reward, done, torch.full((B,), self.max_p**ALPHA, device=self.dev))
        fire = closing & (peak_pnl > 0) & (peak_pnl > THRESHOLD * actual)
        boost = (BOOST * self.max_p) ** ALPHA
        hb = h[fire]
        self.push(hb, hb, a[fire], peak_pnl[fire], torch.ones(hb.shape[0], device=self.dev),
                  torch.full((hb.shape[0],), boost, device=self.dev))  # fmt: skip
        closes = closing.nonzero().squeeze(1)
        slot = (self.r_head + torch.arange(closes.numel(), device=self.dev)) % RING
        self.r_entry[slot], self.r_dir[slot] = closed_entry[closes], closed_dir[closes]
        self.r_actual[slot], self.r_h[slot] = actual[closes], h[closes]
        self.r_step[slot], self.r_env[slot] = float(self.t), closes
        self.r_head += closes.numel()
        due = self.r_step >= 0
        due &= (self.t - self.r_step) >= LOOKAHEAD
        fwd = self.r_dir * (self.mid[self.cursor[self.r_env]] - self.r_entry) * LOT_MULT
        ffire = due & (fwd > 0) & (fwd > THRESHOLD * self.r_actual)
        hf = self.r_h[ffire]
        self.push(hf, hf, torch.where(self.r_dir[ffire] > 0, 1, 2), fwd[ffire],
                  torch.ones(hf.shape[0], device=self.dev),
                  torch.full((hf.shape[0],), boost, device=self.dev))  # fmt: skip
        self.r_step[due] = -1
        # --- learn ---
        size = min(self.head, self.N)
        p = self.prio[:size]
        idx = torch.multinomial(p, BATCH, replacement=True, generator=self.g)
        probs = p[idx] / p.sum()
        w = (size * probs) ** -BETA
        w = w / w.max()
        q = self.q(self.s_h[idx]).gather(1, self.s_a[idx, None]).squeeze(1)
        with torch.no_grad():
            best = self.q(self.s_h2[idx]).argmax(1, keepdim=True)
            nxt = self.q_target(self.s_h2[idx]).gather(1, best).squeeze(1)
            y = self.s_r[idx] + GAMMA * (1 - self.s_d[idx]) * nxt
        td = y - q
        loss = (w * nn.functional.huber_loss(q, y, reduction="none")).mean()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.q.parameters(), CLIP)
        self.opt.step()
        new = td.detach().abs() + 1e-6
        self.prio[idx] = new**ALPHA
        self.max_p = max(self.max_p, float(new.max()))
        if self.t % TARGET_PERIOD == 0:
            self.q_target.load_state_dict(self.q.state_dict())
        self.t += 1


def measure(B: int, dev: torch.device) -> float:
    """Median µs per step (common.median_us)."""
    peer = Peer(B, dev)

    def run(n: int) -> None:
        for _ in range(n):
            peer.step()

    return median_us(run, torch.cuda.synchronize if dev.type == "cuda" else lambda: None)


def check(dev: torch.device, B: int = 256) -> None:
    """Sanity of the first steps: every real row and each injection stored, a finite loss."""
    peer = Peer(B, dev)
    for _ in range(5):
        peer.step()
    assert peer.head >= 5 * B, peer.head
    assert torch.isfinite(peer.prio[: peer.head]).all() and peer.max_p >= 1.0


def set_precision(precision: str) -> None:
    """float32: true FP32 matmuls; tf32: TF32 tensor cores (what JAX does by default on GPU)."""
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"


def main() -> None:
    args = arguments(__doc__, precisions=("float32", "tf32"))
    dev = torch.device("cuda")
    check(dev)
    rows = []
    for precision in args.precision:
        set_precision(precision)
        rows += [{"peer": "torch_eager", "envs": B, "precision": precision, "us": measure(B, dev)}
                 for B in args.envs]  # fmt: skip
    report(rows, args.json)


if __name__ == "__main__":
    main()
