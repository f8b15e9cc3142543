"""One learner update (sampling excluded) at batch 512, H = 32, hidden 256 x 256, 3 actions.

    python3 benchmarks/learner_update.py [--batch 512] [--hidden 256]

The update: gather the batch from a full replay (N = 2^20), forward the online net on h_t and
h_tp1 and the target net on h_tp1, double-DQN TD + IS-weighted Huber loss, backward, global-norm
clip, Adam, target sync, priority update. Rows: alpha_rl on cuda launched one kernel at a time,
the same update captured into a CUDA graph and replayed, and the peer a user would write in
PyTorch (nn.Sequential, torch.optim.Adam, smooth_l1_loss, clip_grad_norm_, eager). CUDA events
around 200 updates, median of 7 repeats.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from cudagraph import Graph, graphs_available, time_events
from hydra import compose, initialize_config_dir

from alpha_rl import paths
from alpha_rl.agent import AgentConfig, Learner
from alpha_rl.isv import DeviceIsv
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.pipeline.configure.config import layout_from_config
from alpha_rl.reference.per import HEAD
from alpha_rl.replay import Replay, ReplayConfig

H, LOG2 = 32, 20


def ours(batch: int, hidden: int) -> tuple[float, float | None]:
    import pycuda.driver as drv

    from alpha_rl.backend.cuda import CudaBackend

    with initialize_config_dir(config_dir=str(paths.conf_dir()), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                f"agent.hidden=[{hidden},{hidden}]",
                "reward.scale=1.0",
                "replay.beta_anneal_updates=100000",
            ],
        )  # as below
    with CudaBackend() as be:
        isv = DeviceIsv(layout_from_config(cfg), be)
        runtime = KernelRuntime(be, {"RC_STRIDE": 7})
        learner = Learner(AgentConfig.from_cfg(cfg.agent), H, 64, batch, runtime, isv, 0)
        replay = Replay(ReplayConfig(LOG2, 0.6, 0.4, 100_000, 1e-6, batch), H, runtime, 0, 64, isv)
        gen = np.random.default_rng(0)
        N = 1 << LOG2
        fills = {"s_h_t": gen.normal(size=N * H), "s_h_tp1": gen.normal(size=N * H),
                 "s_reward": gen.normal(size=N), "leaves": gen.random(N)}  # fmt: skip
        for name, values in fills.items():
            be.write(replay.arrays[name], values.astype(np.float32))
        be.write(replay.arrays["s_action"], gen.integers(0, 3, N).astype(np.int32))
        state = np.zeros(8, np.uint64)
        state[HEAD] = N
        be.write(replay.arrays["state"], state)
        idx = be.upload(gen.integers(0, N, batch).astype(np.int32))
        weights = be.upload(gen.uniform(0.1, 1.0, batch).astype(np.float32))
        stream = drv.Stream()
        step = lambda: learner.update(replay, idx, weights, stream)  # noqa: E731
        eager = time_events(drv, stream, step)
        if not graphs_available():
            return eager, None
        graph = Graph(stream, step)
        graphed = time_events(drv, stream, graph.launch)
        graph.close()
        return eager, graphed


def torch_peer(batch: int, hidden: int) -> float:
    import torch
    import torch.nn.functional as F  # noqa: N812 - the customary name
    from torch import nn

    dev, N = torch.device("cuda"), 1 << LOG2
    torch.manual_seed(0)
    s_h_t, s_h_tp1 = torch.randn(N, H, device=dev), torch.randn(N, H, device=dev)
    s_a = torch.randint(0, 3, (N,), device=dev)
    s_r, s_d = torch.randn(N, device=dev), torch.zeros(N, device=dev)
    prio = torch.rand(N, device=dev)

    def net() -> nn.Module:
        return nn.Sequential(nn.Linear(H, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                             nn.Linear(hidden, 3)).to(dev)  # fmt: skip

    online, target = net(), net()
    target.load_state_dict(online.state_dict())
    opt = torch.optim.Adam(online.parameters(), lr=3e-4)
    idx = torch.randint(0, N, (batch,), device=dev)
    w = torch.rand(batch, device=dev) * 0.9 + 0.1
    counter = {"updates": 0}

    def update() -> None:
        x, x1, a, r, d = s_h_t[idx], s_h_tp1[idx], s_a[idx], s_r[idx], s_d[idx]
        with torch.no_grad():
            best = online(x1).argmax(dim=1, keepdim=True)
            y = r + 0.99 * (1 - d) * target(x1).gather(1, best).squeeze(1)
        q = online(x).gather(1, a.unsqueeze(1)).squeeze(1)
        loss = (w * F.smooth_l1_loss(q, y, reduction="none")).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(online.parameters(), 10.0)
        opt.step()
        prio[idx] = ((y - q).detach().abs() + 1e-6) ** 0.6
        counter["updates"] += 1
        if counter["updates"] % 1000 == 0:
            target.load_state_dict(online.state_dict())

    class TorchDrv:  # time_events' event interface over torch's events
        @staticmethod
        def Event():
            e = torch.cuda.Event(enable_timing=True)
            e.time_till = e.elapsed_time
            return e

    stream = torch.cuda.current_stream()
    return time_events(TorchDrv, stream, update)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    eager, graphed = ours(args.batch, args.hidden)
    peer = torch_peer(args.batch, args.hidden)
    best = graphed if graphed is not None else eager
    graph_text = "n/a" if graphed is None else f"{graphed:.1f} us"
    print(f"learner update, batch {args.batch}, H {H}, hidden {args.hidden}: cuda eager "
          f"{eager:.1f} us | cuda graph {graph_text} | torch {peer:.1f} us | "
          f"torch/ours {peer / best:.2f}x")  # fmt: skip
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(eager_us=eager, graph_us=graphed, torch_us=peer), fh, indent=2)


if __name__ == "__main__":
    main()
