"""The DQN learner (DESIGN §7): Q-network, double-DQN update, epsilon-greedy acting, aux head.

`QNetwork` sequences the mlp_* kernels for a forward pass and its backward pass over one flat
parameter vector; it takes the kernels as `ops`, so the float64 gradient check runs the very same
sequence on the NumPy oracles. `Learner` owns the online and target parameters, Adam's moments and
counters, the aux head and every buffer, and runs `act`, `learn` and `train_aux` on either
backend with no host sync (l_q, l_aux, epsilon and the gradient norm land in ISV slots).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, fields
from types import SimpleNamespace
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from alpha_rl import settings
from alpha_rl.abi import ENV_ACTIONS
from alpha_rl.backend.base import Backend, DeviceArray
from alpha_rl.errors import ConfigError
from alpha_rl.isv import ABSENT, DeviceIsv
from alpha_rl.kernels import aux, c51, dqn, mlp, noisy
from alpha_rl.kernels.runtime import KernelRuntime
from alpha_rl.rng import Stream, draw_uniform

F32, I32 = np.float32, np.int32
ACTIONS = ENV_ACTIONS["ACTIONS"]  # FLAT, LONG, SHORT (cuda/env.cuh)
SPLIT_ROWS, MAX_SPLITS = 128, 8  # split-K of the weight gradients: rows per split, most splits
# products that fill WIDE_MIN_BLOCKS 128 x 128 tiles run on mlp_gemm_128, whatever K (at K = 32
# its cp.async stages match the 32 x 32 tile: 65536 x 256 x 32 ~91 vs 92.4 µs in the step), and
# those that fill as many 64 x 64 tiles over K >= WIDE_MIN_K on mlp_gemm_64 (H200,
# benchmarks/gemm_shapes.py: 4096 x 256 x 256 26.8 µs wide vs 41.2 µs on 32 x 32 tiles;
# 4096 x 256 x 32 9.3 µs vs 7.8 µs: with K = 32 the 64 tile's longer set-up does not pay)
WIDE_MIN_BLOCKS, WIDE_MIN_K = 128, 128


def gemm_kind(M: int, N: int, K: int) -> str:
    """Which gemm runs an [M, N] output over K: "gemm_128", "gemm_64" or "gemm" (all three add
    in the same order, so the choice changes the speed, never the result)."""
    if mlp.tiles(M, N, mlp.HUGE_TILE) >= WIDE_MIN_BLOCKS:
        return "gemm_128"
    if K >= WIDE_MIN_K and mlp.tiles(M, N, mlp.WIDE_TILE) >= WIDE_MIN_BLOCKS:
        return "gemm_64"
    return "gemm"


@dataclass(frozen=True)
class Layer:
    """One dense layer's place in the flat parameter vector: W [n_out, n_in] then b [n_out]."""

    w: int
    b: int
    n_in: int
    n_out: int


@dataclass(frozen=True)
class NetLayout:
    """obs_dim -> hidden... -> out_dim, ReLU between. out_dim = atoms x A, or atoms x (A + 1)
    with the dueling head; atom-major (C51: logits[row, atom, action]; atoms = 1: Q itself)."""

    layers: tuple[Layer, ...]
    actions: int
    dueling: bool
    atoms: int = 1

    @classmethod
    def build(
        cls, obs_dim: int, hidden: tuple[int, ...], actions: int, dueling: bool, atoms: int = 1
    ) -> NetLayout:
        widths = (obs_dim, *hidden, atoms * (actions + 1 if dueling else actions))
        layers, offset = [], 0
        for n_in, n_out in itertools.pairwise(widths):
            layers.append(Layer(offset, offset + n_in * n_out, n_in, n_out))
            offset += n_in * n_out + n_out
        return cls(tuple(layers), actions, dueling, atoms)

    @property
    def size(self) -> int:
        last = self.layers[-1]
        return last.b + last.n_out

    @property
    def outputs(self) -> int:
        """Values a row's forward gives: atoms x A (Q [A] when atoms = 1)."""
        return self.atoms * self.actions


def init_params(layout: NetLayout, seed: int) -> np.ndarray:
    """W and b of each layer ~ U(-1/sqrt(n_in), 1/sqrt(n_in)) from the PARAMS stream (float32)."""
    u = draw_uniform(seed, Stream.PARAMS, np.arange(layout.size, dtype=np.uint64))
    u = u.astype(np.float64)
    theta = np.empty(layout.size, F32)
    for layer in layout.layers:
        stop = layer.b + layer.n_out
        theta[layer.w : stop] = ((2 * u[layer.w : stop] - 1) / np.sqrt(layer.n_in)).astype(F32)
    return theta


def init_sigma(layout: NetLayout, sigma0: float) -> np.ndarray:
    """Noisy layers' initial scales: sigma0 / sqrt(n_in) for each layer's W and b (float32)."""
    sigma = np.empty(layout.size, F32)
    for layer in layout.layers:
        sigma[layer.w : layer.b + layer.n_out] = F32(sigma0 / np.sqrt(layer.n_in))
    return sigma


def noise_units(layout: NetLayout) -> tuple[np.ndarray, np.ndarray, int]:
    """Each parameter's noise units (cuda/noisy.cu): unit_in [P] (-1 for a bias), unit_out [P],
    and the number of units N (each layer's n_in inputs, then its n_out outputs)."""
    unit_in = np.empty(layout.size, I32)
    unit_out = np.empty(layout.size, I32)
    first = 0
    for ly in layout.layers:
        outs = first + ly.n_in + np.arange(ly.n_out, dtype=I32)
        unit_in[ly.w : ly.b] = np.tile(first + np.arange(ly.n_in, dtype=I32), ly.n_out)
        unit_out[ly.w : ly.b] = np.repeat(outs, ly.n_in)
        unit_in[ly.b : ly.b + ly.n_out] = -1
        unit_out[ly.b : ly.b + ly.n_out] = outs
        first += ly.n_in + ly.n_out
    return unit_in, unit_out, first


def layer_views(theta: Any, layout: NetLayout) -> list[tuple[Any, Any]]:
    """(W, b) views into a flat parameter (or gradient) vector, one pair per layer."""
    return [(theta[ly.w : ly.b], theta[ly.b : ly.b + ly.n_out]) for ly in layout.layers]


class QNetwork:
    """Forward and backward passes of the MLP, launched through `ops` (gemm, bias_grad,
    duel_f, duel_b; optionally gemm_64, gemm_128, gemm_rows, gemm_pair + gemm_rows_pair,
    gemm_partial + sum_splits) on buffers from `alloc(n)`."""

    def __init__(self, layout: NetLayout, ops: Any, alloc: Any) -> None:
        self.layout, self.ops, self.alloc = layout, ops, alloc

    def gemm(self, M: int, N: int, K: int) -> Any:
        """The gemm for an [M, N] output over K (`gemm_kind`), where `ops` has it; else the
        next smaller tile's, down to the 32 x 32 one."""
        kinds = ("gemm_128", "gemm_64", "gemm")
        for kind in kinds[kinds.index(gemm_kind(M, N, K)) : -1]:
            if hasattr(self.ops, kind):
                return getattr(self.ops, kind)
        return self.ops.gemm

    def splits(self, rows: int) -> int:
        """K-splits of the weight-gradient products over `rows` (1: one pass; needs the ops
        gemm_partial and sum_splits): a chunk of about SPLIT_ROWS rows per split, at most 8."""
        if not hasattr(self.ops, "gemm_partial"):
            return 1
        return max(1, min(MAX_SPLITS, rows // SPLIT_ROWS))

    def buffers(self, rows: int) -> SimpleNamespace:
        """Activation buffers for `rows` inputs: h per layer, q, and backward scratch."""
        widths = [ly.n_out for ly in self.layout.layers]
        splits = self.splits(rows)
        biggest = max(ly.n_in * ly.n_out for ly in self.layout.layers)
        return SimpleNamespace(
            rows=rows,
            h=[self.alloc(rows * w) for w in widths],
            d=[self.alloc(rows * w) for w in widths],
            q=self.alloc(rows * self.layout.outputs) if self.layout.dueling else None,
            splits=splits,
            work=self.alloc(splits * biggest) if splits > 1 else None,
        )

    def first_rows(self, bufs: SimpleNamespace, rows: int) -> SimpleNamespace:
        """Views of the first `rows` rows of `bufs` (made for more rows): after a forward over
        all of them, `backward` with these views backpropagates those rows alone (a row's
        activations do not depend on the other rows)."""
        if rows > bufs.rows:
            raise ValueError(f"first_rows: {rows} rows of buffers made for {bufs.rows}")
        widths = [ly.n_out for ly in self.layout.layers]
        splits = self.splits(rows)
        return SimpleNamespace(
            rows=rows,
            h=[h[: rows * w] for h, w in zip(bufs.h, widths, strict=True)],
            d=[d[: rows * w] for d, w in zip(bufs.d, widths, strict=True)],
            q=None if bufs.q is None else bufs.q[: rows * self.layout.outputs],
            splits=splits,
            work=bufs.work if splits > 1 else None,
        )

    def forward(self, params: list, x: Any, bufs: SimpleNamespace, stream: Any = None) -> Any:
        """Q [rows, A] (C51: logits [rows, atoms, A]) of inputs x [rows, obs_dim] (the returned
        buffer)."""
        inp, last = x, len(self.layout.layers) - 1
        for i, (layer, (W, b)) in enumerate(zip(self.layout.layers, params, strict=True)):
            rows, n_out, n_in, relu = bufs.rows, layer.n_out, layer.n_in, int(i < last)
            narrow = getattr(self.ops, "gemm_rows", None)
            if narrow is not None and n_out <= mlp.ROWS_MAX_N:  # the head: a warp per row
                narrow(X=inp, W=W, bias=b, Y=bufs.h[i], M=rows, N=n_out, K=n_in, relu=relu,
                       stream=stream)  # fmt: skip
            else:
                gemm = self.gemm(rows, n_out, n_in)
                gemm(A=inp, B=W, bias=b, mask=None, C=bufs.h[i], M=rows, N=n_out, K=n_in,
                     trans_a=0, trans_b=1, relu=relu, stream=stream)  # fmt: skip
            inp = bufs.h[i]
        return self._output(bufs, stream)

    def _output(self, bufs: SimpleNamespace, stream: Any) -> Any:
        """Q [rows, A] (logits [rows, atoms, A]) after the last layer of a forward into `bufs`:
        that layer's output, or the dueling combination of it (per atom)."""
        last = bufs.h[len(self.layout.layers) - 1]
        if not self.layout.dueling:
            return last
        ly = self.layout
        self.ops.duel_f(VA=last, Q=bufs.q, M=bufs.rows * ly.atoms, A=ly.actions, stream=stream)
        return bufs.q

    def forward_pair(
        self, params: list, x: Any, bufs: SimpleNamespace, params2: list, x2: Any,
        bufs2: SimpleNamespace, stream: Any = None,
    ) -> tuple[Any, Any]:  # fmt: skip
        """`forward` of two networks of this layout (their own parameters, inputs and buffers)
        with one launch per layer (ops gemm_pair and gemm_rows_pair; without them, two
        forwards). The same results as two forwards, bit for bit."""
        pair, rows_pair = (
            getattr(self.ops, "gemm_pair", None),
            getattr(self.ops, "gemm_rows_pair", None),
        )
        if pair is None or rows_pair is None:
            return self.forward(params, x, bufs, stream), self.forward(params2, x2, bufs2, stream)
        inp, inp2, last = x, x2, len(self.layout.layers) - 1
        for i, layer in enumerate(self.layout.layers):
            (W, b), (W2, b2) = params[i], params2[i]
            narrow = layer.n_out <= mlp.ROWS_MAX_N  # the head: a warp per row
            (rows_pair if narrow else pair)(
                X1=inp, W1=W, bias1=b, X2=inp2, W2=W2, bias2=b2, Y1=bufs.h[i], Y2=bufs2.h[i],
                M1=bufs.rows, M2=bufs2.rows, N=layer.n_out, K=layer.n_in, relu=int(i < last),
                stream=stream,
            )  # fmt: skip
            inp, inp2 = bufs.h[i], bufs2.h[i]
        return self._output(bufs, stream), self._output(bufs2, stream)

    def backward(
        self, params: list, x: Any, bufs: SimpleNamespace, dq: Any, grads: list, stream: Any = None
    ) -> None:
        """Parameter gradients (into the `grads` views) of sum(dq * Q) after `forward(x)`."""
        last = len(self.layout.layers) - 1
        d = dq
        if self.layout.dueling:
            self.ops.duel_b(dQ=dq, dVA=bufs.d[last], M=bufs.rows * self.layout.atoms,
                            A=self.layout.actions, stream=stream)  # fmt: skip
            d = bufs.d[last]
        for i in range(last, -1, -1):
            layer, (W, _), (gW, gb) = self.layout.layers[i], params[i], grads[i]
            x_in = bufs.h[i - 1] if i > 0 else x
            n_out, n_in, S = layer.n_out, layer.n_in, bufs.splits
            if S > 1:  # dW = dY^T X over many rows and few outputs: split K across blocks
                self.ops.gemm_partial(A=d, B=x_in, P=bufs.work, M=n_out, N=n_in, K=bufs.rows,
                                      trans_a=1, trans_b=0, splits=S, stream=stream)  # fmt: skip
                self.ops.sum_splits(P=bufs.work, dY=d, C=gW, db=gb, MN=n_out * n_in, splits=S,
                                    M=bufs.rows, N=n_out, stream=stream)  # fmt: skip
            else:
                gemm = self.gemm(n_out, n_in, bufs.rows)
                gemm(A=d, B=x_in, bias=None, mask=None, C=gW, M=n_out, N=n_in, K=bufs.rows,
                     trans_a=1, trans_b=0, relu=0, stream=stream)  # fmt: skip
                self.ops.bias_grad(dY=d, db=gb, M=bufs.rows, N=layer.n_out, stream=stream)
            if i > 0:  # gradient at the layer's input, through the previous ReLU
                self.gemm(bufs.rows, layer.n_in, layer.n_out)(
                    A=d, B=W, bias=None, mask=bufs.h[i - 1], C=bufs.d[i - 1], M=bufs.rows,
                    N=layer.n_in, K=layer.n_out, trans_a=0, trans_b=0, relu=0, stream=stream,
                )  # fmt: skip
                d = bufs.d[i - 1]


@dataclass(frozen=True)
class AgentConfig:
    """Settings of the learner (conf/agent/dqn.yaml)."""

    hidden: tuple[int, ...]
    dueling: bool
    gamma: float
    cut_on_done: bool
    huber_kappa: float
    lr: float
    adam_betas: tuple[float, float]
    adam_eps: float
    grad_clip: float
    target_tau: float
    target_period: int
    eps_start: float
    eps_end: float
    eps_decay_steps: float
    aux_lr: float
    learn_start: int
    updates_per_step: int
    n_step: int  # 1: one-step targets; n: n-step returns cut at a trade close (nstep.py)
    noisy: bool  # factorised Gaussian noisy layers instead of epsilon-greedy (cuda/noisy.cu)
    sigma0: float  # noisy layers' initial sigma = sigma0 / sqrt(n_in)
    distributional: bool  # the C51 head: a categorical return distribution (cuda/c51.cu)
    atoms: int  # C51's atoms
    v_min: float  # C51's support [v_min, v_max], reward units
    v_max: float

    @classmethod
    def from_cfg(cls, node: DictConfig) -> AgentConfig:
        """Typed and range-checked `agent` config; errors name the key, the value and the range."""
        agent = settings.section(node, "agent")
        where = "conf/agent/"

        def num(key: str, ok: Callable[[float], bool], what: str) -> float:
            return settings.number(agent, f"agent.{key}", ok, what, where)

        def whole(key: str, least: int, unit: str) -> int:
            return settings.integer(agent, f"agent.{key}", lambda v: v >= least,
                                    f">= {least} ({unit})", where)  # fmt: skip

        widths = OmegaConf.select(agent, "agent.hidden")
        hidden = OmegaConf.to_container(widths) if OmegaConf.is_list(widths) else widths
        ok = isinstance(hidden, list) and len(hidden) >= 1
        if not (ok and all(type(w) is int and w >= 1 for w in hidden)):
            raise ConfigError(f"agent.hidden={hidden!r} must be a list of whole numbers >= 1 "
                              f"(the hidden layers' widths) (see {where})")  # fmt: skip
        beta1, beta2 = settings.numbers(agent, "agent.adam_betas", 2, lambda v: 0 <= v < 1,
                                        "in [0, 1)", where)  # fmt: skip
        start = num("epsilon.start", lambda v: 0 <= v <= 1, "in [0, 1]")
        n_step = whole("n_step", 1, "env steps a transition's return spans; 1: one-step")
        learn_start = whole("learn_start", 0, "env steps")
        if learn_start < n_step - 1:
            raise ConfigError(
                f"agent.learn_start={learn_start} is less than agent.n_step - 1 = {n_step - 1}: "
                "the first n-step transitions reach the replay after n - 1 steps, so the first "
                f"update would sample an empty buffer; set agent.learn_start >= {n_step - 1} "
                f"(see {where})"
            )
        atoms = settings.integer(agent, "agent.atoms", lambda v: 2 <= v <= c51.MAX_ATOMS,
                                 f"in [2, {c51.MAX_ATOMS}] (C51's atoms)", where)  # fmt: skip
        v_min = num("v_min", np.isfinite, "(reward units)")
        v_max = num("v_max", lambda v: v > v_min and np.isfinite(v),
                    f"> agent.v_min={v_min:g} (reward units)")  # fmt: skip
        return cls(
            hidden=tuple(hidden),
            dueling=settings.flag(agent, "agent.dueling", where),
            gamma=num("gamma", lambda v: 0 <= v <= 1, "in [0, 1] (discount per env step)"),
            cut_on_done=settings.flag(agent, "agent.cut_on_done", where),
            huber_kappa=num("huber_kappa", lambda v: v > 0, "> 0 (reward units)"),
            lr=num("lr", lambda v: v > 0, "> 0 (Adam's learning rate)"),
            adam_betas=(beta1, beta2),
            adam_eps=num("adam_eps", lambda v: v > 0, "> 0"),
            grad_clip=num("grad_clip", lambda v: v >= 0, ">= 0 (0: no clipping)"),
            target_tau=num(
                "target_tau",
                lambda v: 0 <= v <= 1,
                "in [0, 1] (0: a hard sync every target_period updates)",
            ),
            target_period=whole("target_period", 1, "learner updates"),
            eps_start=start,
            eps_end=num(
                "epsilon.end", lambda v: 0 <= v <= start, f"in [0, agent.epsilon.start={start:g}]"
            ),
            eps_decay_steps=num("epsilon.decay_steps", lambda v: v > 0, "> 0 (env steps)"),
            aux_lr=num("aux_lr", lambda v: v >= 0, ">= 0 (the aux head's SGD learning rate)"),
            learn_start=learn_start,
            updates_per_step=whole("updates_per_step", 1, "learner updates per env step"),
            n_step=n_step,
            noisy=settings.flag(agent, "agent.noisy", where),
            sigma0=num("sigma0", lambda v: v >= 0, ">= 0 (the noisy layers' sigma x sqrt(n_in))"),
            distributional=settings.flag(agent, "agent.distributional", where),
            atoms=atoms,
            v_min=v_min,
            v_max=v_max,
        )


@dataclass(frozen=True)
class AlphaConfig:
    """α (conf/alpha/on.yaml): the aux head's learned bias on the directional Q-values."""

    lr: float  # w_α's Adam learning rate
    bound: float  # |w_α[a]| <= bound
    init: float  # the directional entries' initial value (FLAT's is 0)


@dataclass(frozen=True)
class AlphaState:
    """w_α and its Adam moments and target copy, [A] each (checkpoint part `alpha`)."""

    w: DeviceArray
    target: DeviceArray
    m: DeviceArray
    v: DeviceArray

    def arrays(self) -> dict[str, DeviceArray]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _slot(isv: DeviceIsv | None, name: str) -> int:
    return isv.layout.index_or_absent(name) if isv is not None else ABSENT


@dataclass(frozen=True)
class LearnerState:
    """The learner's device arrays a resume needs: everything that persists between updates."""

    theta: DeviceArray  # online network parameters [P] (noisy: mu then sigma, [2P])
    target: DeviceArray  # target network parameters, as theta
    adam_m: DeviceArray  # Adam's first moments, as theta
    adam_v: DeviceArray  # Adam's second moments, as theta
    counters: DeviceArray  # uint64 [DQN_COUNTERS]: Adam's step, the acting step, scratch
    stats: DeviceArray  # [1]: the last gradient norm (Adam's clipping reads it)
    aux_w: DeviceArray  # aux head weights and bias [H + 1]

    def arrays(self) -> dict[str, DeviceArray]:
        """Field name -> array, in declaration order (the checkpoint's keys)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


class Learner:
    """Online/target Q-networks, Adam, epsilon-greedy acting and the aux head of one run."""

    def __init__(
        self,
        cfg: AgentConfig,
        obs_dim: int,
        num_envs: int,
        batch: int,
        runtime: KernelRuntime,
        isv: DeviceIsv | None,
        seed: int,
        alpha: AlphaConfig | None = None,
    ) -> None:
        if batch > dqn.MAX_BATCH:
            raise ConfigError(f"replay.batch_size={batch} exceeds the learner's {dqn.MAX_BATCH}")
        if obs_dim + 3 > dqn.BLOCK:  # dqn_aux_train: a thread per weight, bias, loss and count
            raise ConfigError(
                f"the observation has {obs_dim} features (env.perception.hidden_dim); "
                f"the aux head takes at most {dqn.BLOCK - 3}"
            )
        if alpha is not None and cfg.distributional:
            raise ConfigError("alpha='on' biases Q-values, which agent.distributional=true does "
                              "not have; use one of the two")  # fmt: skip
        self.cfg, self.obs_dim, self.num_envs, self.batch = cfg, obs_dim, num_envs, batch
        self.runtime, self.isv, self.seed, self.alpha_cfg = runtime, isv, seed, alpha
        atoms = cfg.atoms if cfg.distributional else 1
        self.layout = NetLayout.build(obs_dim, cfg.hidden, ACTIONS, cfg.dueling, atoms)
        be, P, H = runtime.backend, self.layout.size, obs_dim
        theta = init_params(self.layout, seed)
        if cfg.noisy:
            theta = np.concatenate([theta, init_sigma(self.layout, cfg.sigma0)])
        self.params = n = theta.size  # what Adam updates: P, or mu and sigma (2P)
        self.state = st = LearnerState(
            theta=be.upload(theta), target=be.upload(theta), adam_m=be.zeros(n, F32),
            adam_v=be.zeros(n, F32), counters=be.zeros(dqn.COUNTERS, np.uint64),
            stats=be.zeros(1, F32), aux_w=be.zeros(H + 1, F32),
        )  # fmt: skip
        self.grad = be.zeros(n, F32)
        # "theta" and "target": the nets' parameters (noisy: their means, which evaluation and
        # the probe use); "act", "online" and "target_net": the weights acting and the update
        # run on (noisy: composed afresh each call)
        self.views = {name: layer_views(array, self.layout)
                      for name, array in (("theta", st.theta), ("target", st.target),
                                          ("grad", self.grad))}  # fmt: skip
        self.noise = None
        if cfg.noisy:
            unit_in, unit_out, units = noise_units(self.layout)
            self.noise = SimpleNamespace(
                unit_in=be.upload(unit_in), unit_out=be.upload(unit_out), units=units,
                act=be.zeros(P, F32), learn=be.zeros(2 * P, F32), noise=be.zeros(P, F32),
            )  # fmt: skip
            self.views["act"] = layer_views(self.noise.act, self.layout)
            self.views["online"] = layer_views(self.noise.learn, self.layout)
            self.views["target_net"] = layer_views(self.noise.learn[P:], self.layout)
        else:
            self.views["act"] = self.views["online"] = self.views["theta"]
            self.views["target_net"] = self.views["target"]
        bind = runtime.bind
        ops = SimpleNamespace(
            gemm=bind(mlp.GEMM),
            gemm_64=bind(mlp.GEMM_64),
            gemm_128=bind(mlp.GEMM_128),
            gemm_rows=bind(mlp.GEMM_ROWS),
            gemm_pair=bind(mlp.GEMM_PAIR),
            gemm_rows_pair=bind(mlp.GEMM_ROWS_PAIR),
            gemm_partial=bind(mlp.GEMM_PARTIAL),
            sum_splits=bind(mlp.SUM_SPLITS),
            bias_grad=bind(mlp.BIAS_GRAD),
            duel_f=bind(mlp.DUELING_FORWARD),
            duel_b=bind(mlp.DUELING_BACKWARD),
        )
        self.net = QNetwork(self.layout, ops, lambda n: be.zeros(n, F32))
        self.k = SimpleNamespace(
            **{
                name.lower(): bind(getattr(dqn, name))
                for name in (
                    "GATHER",
                    "TD",
                    "GRAD_NORM",
                    "ADAM",
                    "ACT",
                    "AUX_TRAIN",
                )
            },
            compose=bind(noisy.COMPOSE),
            noisy_grad=bind(noisy.GRAD),
            c51_q=bind(c51.Q),
            c51_project=bind(c51.PROJECT),
            c51_loss=bind(c51.LOSS),
            alpha_bias=bind(aux.ALPHA_BIAS),
            alpha_update=bind(aux.ALPHA_UPDATE),
        )
        self.alpha = None
        if alpha is not None:  # w_α: FLAT's entry 0, the directional ones at init
            w0 = np.array([0.0 if a == aux.FLAT else alpha.init for a in range(ACTIONS)], F32)
            self.alpha = AlphaState(w=be.upload(w0), target=be.upload(w0),
                                    m=be.zeros(ACTIONS, F32), v=be.zeros(ACTIONS, F32))  # fmt: skip
        self.env_bufs = self.net.buffers(num_envs)
        self.q_env = self.q_buffer(num_envs)
        # the online net runs h_t and h_tp1 as one forward of 2 x batch rows (x_t then x_tp1);
        # the backward pass goes through the first `batch` rows of it
        online = self.net.buffers(2 * batch)
        self.bufs = {
            "online": online,
            "t": self.net.first_rows(online, batch),
            "target": self.net.buffers(batch),
        }
        self.b = SimpleNamespace(
            x=be.zeros(2 * batch * H, F32),
            action=be.zeros(batch, I32),
            reward=be.zeros(batch, F32),
            done=be.zeros(batch, F32),
            synthetic=be.zeros(batch, np.uint8),
            # the transitions' own discounts (gamma^k) with n-step returns; else gamma for all
            discount=be.zeros(batch, F32) if cfg.n_step > 1 else None,
            delta=be.zeros(batch, F32),
            dq=be.zeros(batch * self.layout.outputs, F32),
            m=be.zeros(batch * atoms, F32) if cfg.distributional else None,
            c51_done=be.zeros(1, np.uint64) if cfg.distributional else None,  # c51_loss scratch
            aux=be.zeros(2 * batch, F32) if alpha is not None else None,  # aux of x_t, x_tp1
        )
        self.actions, self.p_up = be.zeros(num_envs, I32), be.zeros(num_envs, F32)
        self.aux_partial = be.zeros(-(-num_envs // dqn.AUX_ROWS) * (H + 3), F32)
        slots = ("loss_q", "loss_aux", "epsilon", "grad_norm", "loss_q_real",
                 "loss_q_synthetic", "batch_synthetic_frac", "w_alpha_long",
                 "w_alpha_short")  # fmt: skip
        self.slots = SimpleNamespace(**{n: _slot(isv, n) for n in slots})

    @property
    def backend(self) -> Backend:
        return self.runtime.backend

    def _isv(self) -> DeviceArray | None:
        return self.isv.array if self.isv is not None else None

    def expected_q(self, out: DeviceArray, q: DeviceArray | None, rows: int,
                   stream: Any = None) -> DeviceArray:  # fmt: skip
        """Q [rows, A] of a forward's output `out`: itself, or with C51 the expected value of
        each action's distribution, written into `q` [rows * A]."""
        if not self.cfg.distributional:
            return out
        c = self.cfg
        self.k.c51_q(logits=out, q=q, M=rows, A=ACTIONS, Z=c.atoms, v_min=c.v_min,
                     v_max=c.v_max, stream=stream)  # fmt: skip
        return q

    def alpha_bias(self, h: DeviceArray, q: DeviceArray, rows: int, target: bool = False,
                   aux_out: DeviceArray | None = None, stream: Any = None) -> None:  # fmt: skip
        """With α on, Q' = Q + w_α aux(h) in place over `rows` rows (the target net's w_α copy
        when `target`); nothing when α is off."""
        if self.alpha is None:
            return
        w = self.alpha.target if target else self.alpha.w
        self.k.alpha_bias(h=h, aux_w=self.state.aux_w, w=w, q=q, aux_out=aux_out, M=rows,
                          H=self.obs_dim, stream=stream)  # fmt: skip

    def q_buffer(self, rows: int) -> DeviceArray | None:
        """A buffer for `expected_q` over `rows` rows (None: not needed)."""
        return self.backend.zeros(rows * ACTIONS, F32) if self.cfg.distributional else None

    def _compose(self, nets: int, word: int, role: int, stream: Any) -> None:
        """The noisy weights of the online net (and with nets = 2 the target net) of this act
        call or update (cuda/noisy.cu)."""
        st, nz = self.state, self.noise
        self.k.compose(
            theta=st.theta, target=st.target if nets == 2 else None, unit_in=nz.unit_in,
            unit_out=nz.unit_out, counters=st.counters,
            weights=nz.learn if nets == 2 else nz.act, noise=nz.noise if nets == 2 else None,
            P=self.layout.size, N=nz.units, nets=nets, seed=self.seed, word=word, role=role,
            stream=stream,
        )  # fmt: skip

    def act(self, h: DeviceArray, stream: Any = None) -> DeviceArray:
        """Actions [B] int32 for h [B * H], epsilon-greedy (noisy: greedy on this call's noisy
        weights); also the aux head's p_up [B]."""
        c, B, st = self.cfg, self.num_envs, self.state
        if c.noisy:
            self._compose(1, dqn.ACT_STEP, noisy.ROLE_ACT, stream)
        out = self.net.forward(self.views["act"], h, self.env_bufs, stream)
        q = self.expected_q(out, self.q_env, B, stream)
        self.alpha_bias(h, q, B, stream=stream)
        eps_start, eps_end = (0.0, 0.0) if c.noisy else (c.eps_start, c.eps_end)
        self.k.act(
            q=q, h=h, aux_w=st.aux_w, action=self.actions, counters=st.counters, isv=self._isv(),
            p_up=self.p_up, B=B, A=ACTIONS, H=self.obs_dim, seed=self.seed,
            eps_start=eps_start, eps_end=eps_end, decay=c.eps_decay_steps,
            eps_idx=self.slots.epsilon, stream=stream,
        )  # fmt: skip
        return self.actions

    def learn(self, replay: Any, stream: Any = None) -> None:
        """One double-DQN update on a prioritized batch; the replay's priorities follow."""
        idx, weights = replay.sample(stream=stream)
        self.update(replay, idx, weights, stream)

    def update(self, replay: Any, idx: DeviceArray, weights: DeviceArray, stream: Any = None):
        """The update on a given batch (slot indices and IS weights) of `replay`."""
        c, M, H, P = self.cfg, self.batch, self.obs_dim, self.layout.size
        r, b = replay.arrays, self.b
        x_t, x_tp1 = b.x[: M * H], b.x[M * H :]
        self.k.gather(
            idx=idx, **{k: r[k] for k in ("s_h_t", "s_h_tp1", "s_action", "s_reward", "s_done",
                                          "s_synthetic")},
            x_t=x_t, x_tp1=x_tp1, action=b.action, reward=b.reward, done=b.done,
            s_discount=r.get("s_discount"), synthetic=b.synthetic, discount=b.discount, M=M,
            H=H, stream=stream,
        )  # fmt: skip
        if c.noisy:  # the update's own noise for both nets, before Adam's step advances
            self._compose(2, dqn.ADAM_STEP, noisy.ROLE_ONLINE, stream)
        q, q_tgt = self.net.forward_pair(
            self.views["online"], b.x, self.bufs["online"], self.views["target_net"], x_tp1,
            self.bufs["target"], stream,
        )  # fmt: skip
        self.alpha_bias(b.x, q, 2 * M, aux_out=b.aux, stream=stream)
        self.alpha_bias(x_tp1, q_tgt, M, target=True, stream=stream)
        out = self.layout.outputs
        q_t, q_tp1 = q[: M * out], q[M * out :]
        slots = dict(loss_idx=self.slots.loss_q, real_idx=self.slots.loss_q_real,
                     synthetic_idx=self.slots.loss_q_synthetic,
                     frac_idx=self.slots.batch_synthetic_frac)  # fmt: skip
        if c.distributional:
            self.k.c51_project(
                logits_tp1=q_tp1, logits_target=q_tgt, reward=b.reward, done=b.done,
                discount=b.discount, m=b.m, M=M, A=ACTIONS, Z=c.atoms, gamma=c.gamma,
                cut_on_done=int(c.cut_on_done), v_min=c.v_min, v_max=c.v_max, stream=stream,
            )  # fmt: skip
            self.k.c51_loss(
                logits_t=q_t, action=b.action, m=b.m, weight=weights, synthetic=b.synthetic,
                delta=b.delta, dlogits=b.dq, isv=self._isv(), done=b.c51_done, M=M, A=ACTIONS,
                Z=c.atoms,
                **slots, stream=stream,
            )  # fmt: skip
        else:
            self.k.td(
                q_t=q_t, q_tp1=q_tp1, q_tp1_target=q_tgt, action=b.action, reward=b.reward,
                done=b.done, weight=weights, synthetic=b.synthetic, discount=b.discount,
                delta=b.delta, dq=b.dq, isv=self._isv(), M=M, A=ACTIONS, gamma=c.gamma,
                cut_on_done=int(c.cut_on_done), kappa=c.huber_kappa, **slots, stream=stream,
            )  # fmt: skip
        self.net.backward(
            self.views["online"], x_t, self.bufs["t"], b.dq, self.views["grad"], stream
        )
        if c.noisy:  # the sigma half of the gradient from the mu half
            self.k.noisy_grad(noise=self.noise.noise, grad=self.grad, P=P, stream=stream)
        st = self.state
        self.k.grad_norm(grad=self.grad, stats=st.stats, counters=st.counters,
                         isv=self._isv(), P=self.params, norm_idx=self.slots.grad_norm,
                         stream=stream)  # fmt: skip
        self.k.adam(
            grad=self.grad, stats=st.stats, counters=st.counters, param=st.theta,
            m=st.adam_m, v=st.adam_v, target=st.target, P=self.params, lr=c.lr,
            beta1=c.adam_betas[0], beta2=c.adam_betas[1], eps=c.adam_eps, clip=c.grad_clip,
            tau=c.target_tau, period=c.target_period, stream=stream,
        )  # fmt: skip
        if self.alpha is not None:  # w_α's own step, from the same dq (dQ'/dw_α = aux)
            al, a = self.alpha, self.alpha_cfg
            self.k.alpha_update(
                dq=b.dq, aux=b.aux[:M], counters=st.counters, w=al.w, m=al.m, v=al.v,
                target=al.target, isv=self._isv(), M=M, lr=a.lr, beta1=c.adam_betas[0],
                beta2=c.adam_betas[1], eps=c.adam_eps, bound=a.bound, tau=c.target_tau,
                period=c.target_period, long_idx=self.slots.w_alpha_long,
                short_idx=self.slots.w_alpha_short, stream=stream,
            )  # fmt: skip
        replay.update(idx, b.delta, stream=stream)

    def train_aux(
        self, h: DeviceArray, fill_mid: DeviceArray, post_mid: DeviceArray, stream: Any = None
    ) -> None:
        """One SGD step of the aux head on this step's rows (label: sign of the mid move)."""
        self.k.aux_train(
            h=h,
            p_up=self.p_up,
            fill_mid=fill_mid,
            post_mid=post_mid,
            w=self.state.aux_w,
            partial=self.aux_partial,
            counters=self.state.counters,
            isv=self._isv(),
            B=self.num_envs,
            H=self.obs_dim,
            lr=self.cfg.aux_lr,
            loss_idx=self.slots.loss_aux,
            stream=stream,
        )

    def q_values(self, h: DeviceArray) -> np.ndarray:
        """Online Q [B, A] of h [B * H] read to the host (evaluation and tests; noisy: the
        means' Q)."""
        out = self.net.forward(self.views["theta"], h, self.env_bufs)
        q = self.expected_q(out, self.q_env, self.num_envs)
        self.alpha_bias(h, q, self.num_envs)
        return self.backend.download(q).reshape(-1, ACTIONS)[: self.num_envs]


def aux_calls(backend: Backend, p_up: DeviceArray, fill_mid: DeviceArray,
              post_mid: DeviceArray) -> tuple[int, int]:  # fmt: skip
    """(right, moved): of the envs whose mid moved over the step (post_mid != fill_mid), how
    many the aux head called right (p_up > 0.5 for up), read to the host."""
    up = backend.download(p_up) > 0.5
    before, after = backend.download(fill_mid), backend.download(post_mid)
    moved = after != before
    return int(((after > before) == up)[moved].sum()), int(moved.sum())


class GreedyPolicy:
    """argmax_a Q(h, a) of the learner's online network for `num_envs` rows (evaluation; noisy:
    its means, without noise), with buffers and counters of its own so the learner's epsilon
    schedule and RNG stay untouched."""

    def __init__(self, learner: Learner, num_envs: int) -> None:
        be = learner.backend
        self.learner, self.num_envs = learner, num_envs
        self.bufs = learner.net.buffers(num_envs)
        self.q = learner.q_buffer(num_envs)
        self.actions, self.p_up = be.zeros(num_envs, I32), be.zeros(num_envs, F32)
        self.counters = be.zeros(dqn.COUNTERS, np.uint64)

    def act(self, h: DeviceArray, stream: Any = None) -> DeviceArray:
        """Greedy actions [B] int32 for h [B * H]; the aux head's p_up [B] in `p_up`."""
        lr, B = self.learner, self.num_envs
        out = lr.net.forward(lr.views["theta"], h, self.bufs, stream)
        q = lr.expected_q(out, self.q, B, stream)
        lr.alpha_bias(h, q, B, stream=stream)
        lr.k.act(q=q, h=h, aux_w=lr.state.aux_w, action=self.actions, counters=self.counters,
                 isv=None, p_up=self.p_up, B=B, A=ACTIONS, H=lr.obs_dim, seed=lr.seed,
                 eps_start=0.0, eps_end=0.0, decay=1.0, eps_idx=-1, stream=stream)  # fmt: skip
        return self.actions
