"""The Q-network's forward and backward passes (DESIGN §7).

`QNetwork` sequences the mlp_* kernels over one flat parameter vector (views per layer from
`layer_views`); it takes the kernels as `MlpOps`, so the float64 gradient check runs the very
same sequence on the NumPy oracles. `Activations` are the buffers one forward of `rows` inputs
writes and its backward reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from alpha_rl.agent.config import PRECISIONS
from alpha_rl.agent.layout import MAX_SPLITS, SPLIT_ROWS, NetLayout, gemm_kind
from alpha_rl.kernels import mlp
from alpha_rl.kernels.runtime import KernelRuntime

Kernel = Callable[..., None]  # a bound kernel (or an oracle) taking its arguments by name


@dataclass(frozen=True)
class MlpOps:
    """The kernels a QNetwork launches: gemm, bias_grad and the dueling pair always; the wider
    tiles (gemm_64, gemm_128), the head's warp per row (gemm_rows), the two-network launches
    (gemm_pair with gemm_rows_pair) and split-K (gemm_partial with sum_splits) where given."""

    gemm: Kernel
    bias_grad: Kernel
    duel_f: Kernel
    duel_b: Kernel
    gemm_64: Kernel | None = None
    gemm_128: Kernel | None = None
    gemm_rows: Kernel | None = None
    gemm_pair: Kernel | None = None
    gemm_rows_pair: Kernel | None = None
    gemm_partial: Kernel | None = None
    sum_splits: Kernel | None = None
    grad_gemm: Kernel | None = None  # the unsplit weight gradients' tile (None: gemm's)
    gemm_splitk: Kernel | None = None  # split-K, its sums and the bias gradient in one launch

    @classmethod
    def bind(cls, runtime: KernelRuntime, precision: str = "fp32") -> MlpOps:
        """Every mlp_* kernel, bound on `runtime`; with precision "tf32" the forward and
        input-gradient products' tiles (gemm, gemm_64, gemm_128, gemm_pair) are the TF32
        tensor-core ones; the head's warp per row (at most ROWS_MAX_N outputs: C51's wider head
        runs on the tiles), the weight gradients (split-K, or grad_gemm = mlp_gemm below
        SPLIT_ROWS x 2 rows) and the bias gradients stay float32."""
        bind = runtime.bind
        if precision not in PRECISIONS:
            raise ValueError(f"precision={precision!r}: one of {', '.join(PRECISIONS)}")
        tf32 = precision == "tf32"
        return cls(
            gemm=bind(mlp.GEMM_TF32_32 if tf32 else mlp.GEMM),
            gemm_64=bind(mlp.GEMM_TF32_64 if tf32 else mlp.GEMM_64),
            gemm_128=bind(mlp.GEMM_TF32 if tf32 else mlp.GEMM_128),
            gemm_rows=bind(mlp.GEMM_ROWS),
            gemm_pair=bind(mlp.GEMM_TF32_PAIR if tf32 else mlp.GEMM_PAIR),
            gemm_rows_pair=bind(mlp.GEMM_ROWS_PAIR),
            gemm_partial=bind(mlp.GEMM_PARTIAL),
            sum_splits=bind(mlp.SUM_SPLITS),
            bias_grad=bind(mlp.BIAS_GRAD),
            duel_f=bind(mlp.DUELING_FORWARD),
            duel_b=bind(mlp.DUELING_BACKWARD),
            grad_gemm=bind(mlp.GEMM) if tf32 else None,
            gemm_splitk=bind(mlp.GEMM_SPLITK),
        )


@dataclass(frozen=True)
class Activations:
    """A forward's buffers for `rows` inputs: h (outputs) and d (their gradients) per layer,
    float32 [rows * n_out] each; q [rows * outputs], the dueling combination (None without the
    dueling head); the split-K scratch `work` [splits * biggest W] (None with one split) and
    `counters` (uint32, one per output tile of the biggest W, zeros between launches; None
    unless ops have gemm_splitk)."""

    rows: int
    h: tuple[Any, ...]
    d: tuple[Any, ...]
    q: Any | None
    splits: int
    work: Any | None
    counters: Any | None = None


class QNetwork:
    """Forward and backward passes of the MLP, launched through `ops` on buffers from
    `alloc(n)`."""

    def __init__(self, layout: NetLayout, ops: MlpOps, alloc: Callable[[int], Any],
                 alloc_counts: Callable[[int], Any] | None = None) -> None:  # fmt: skip
        """alloc(n): a float32 buffer of n zeros; alloc_counts(n): a uint32 one (needed by
        ops.gemm_splitk; without it split-K runs as gemm_partial + sum_splits)."""
        self.layout, self.ops, self.alloc, self.alloc_counts = layout, ops, alloc, alloc_counts

    def gemm(self, M: int, N: int, K: int) -> Kernel:
        """The gemm for an [M, N] output over K (`gemm_kind`), where `ops` has it; else the
        next smaller tile's, down to the 32 x 32 one."""
        kinds = ("gemm_128", "gemm_64", "gemm")
        for kind in kinds[kinds.index(gemm_kind(M, N, K)) : -1]:
            chosen = getattr(self.ops, kind)
            if chosen is not None:
                return chosen
        return self.ops.gemm

    def splits(self, rows: int) -> int:
        """K-splits of the weight-gradient products over `rows` (1: one pass; needs the ops
        gemm_partial and sum_splits): a chunk of about SPLIT_ROWS rows per split, at most 8."""
        if self.ops.gemm_partial is None:
            return 1
        return max(1, min(MAX_SPLITS, rows // SPLIT_ROWS))

    def buffers(self, rows: int) -> Activations:
        """Activation buffers for `rows` inputs: h per layer, q, and backward scratch."""
        widths = [ly.n_out for ly in self.layout.layers]
        splits = self.splits(rows)
        biggest = max(ly.n_in * ly.n_out for ly in self.layout.layers)
        return Activations(
            rows=rows,
            h=tuple(self.alloc(rows * w) for w in widths),
            d=tuple(self.alloc(rows * w) for w in widths),
            q=self.alloc(rows * self.layout.outputs) if self.layout.dueling else None,
            splits=splits,
            work=self.alloc(splits * biggest) if splits > 1 else None,
            counters=self.alloc_counts(
                max(mlp.tiles(ly.n_out, ly.n_in) for ly in self.layout.layers)
            )
            if splits > 1 and self.ops.gemm_splitk is not None and self.alloc_counts is not None
            else None,
        )

    def first_rows(self, bufs: Activations, rows: int) -> Activations:
        """Views of the first `rows` rows of `bufs` (made for more rows): after a forward over
        all of them, `backward` with these views backpropagates those rows alone (a row's
        activations do not depend on the other rows)."""
        if rows > bufs.rows:
            raise ValueError(f"first_rows: {rows} rows of buffers made for {bufs.rows}")
        widths = [ly.n_out for ly in self.layout.layers]
        splits = self.splits(rows)
        return Activations(
            rows=rows,
            h=tuple(h[: rows * w] for h, w in zip(bufs.h, widths, strict=True)),
            d=tuple(d[: rows * w] for d, w in zip(bufs.d, widths, strict=True)),
            q=None if bufs.q is None else bufs.q[: rows * self.layout.outputs],
            splits=splits,
            work=bufs.work if splits > 1 else None,
            counters=bufs.counters if splits > 1 else None,
        )

    def forward(self, params: list, x: Any, bufs: Activations, stream: Any = None) -> Any:
        """Q [rows, A] (C51: logits [rows, atoms, A]) of inputs x [rows, obs_dim] (the returned
        buffer)."""
        inp, last = x, len(self.layout.layers) - 1
        for i, (layer, (W, b)) in enumerate(zip(self.layout.layers, params, strict=True)):
            rows, n_out, n_in, relu = bufs.rows, layer.n_out, layer.n_in, int(i < last)
            narrow = self.ops.gemm_rows
            if narrow is not None and n_out <= mlp.ROWS_MAX_N:  # the head: a warp per row
                narrow(X=inp, W=W, bias=b, Y=bufs.h[i], M=rows, N=n_out, K=n_in, relu=relu,
                       stream=stream)  # fmt: skip
            else:
                gemm = self.gemm(rows, n_out, n_in)
                gemm(A=inp, B=W, bias=b, mask=None, C=bufs.h[i], M=rows, N=n_out, K=n_in,
                     trans_a=0, trans_b=1, relu=relu, stream=stream)  # fmt: skip
            inp = bufs.h[i]
        return self._output(bufs, stream)

    def _output(self, bufs: Activations, stream: Any) -> Any:
        """Q [rows, A] (logits [rows, atoms, A]) after the last layer of a forward into `bufs`:
        that layer's output, or the dueling combination of it (per atom)."""
        last = bufs.h[len(self.layout.layers) - 1]
        if not self.layout.dueling:
            return last
        ly = self.layout
        self.ops.duel_f(VA=last, Q=bufs.q, M=bufs.rows * ly.atoms, A=ly.actions, stream=stream)
        return bufs.q

    def forward_pair(
        self, params: list, x: Any, bufs: Activations, params2: list, x2: Any,
        bufs2: Activations, stream: Any = None,
    ) -> tuple[Any, Any]:  # fmt: skip
        """`forward` of two networks of this layout (their own parameters, inputs and buffers)
        with one launch per layer (ops gemm_pair and gemm_rows_pair; without them, two
        forwards). The same results as two forwards, bit for bit."""
        pair, rows_pair = self.ops.gemm_pair, self.ops.gemm_rows_pair
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
        self, params: list, x: Any, bufs: Activations, dq: Any, grads: list, stream: Any = None
    ) -> None:
        """Parameter gradients (into the `grads` views) of sum(dq * Q) after `forward(x)`."""
        last = len(self.layout.layers) - 1
        d = dq
        if self.layout.dueling:
            self.ops.duel_b(dQ=dq, dVA=bufs.d[last], M=bufs.rows * self.layout.atoms,
                            A=self.layout.actions, stream=stream)  # fmt: skip
            d = bufs.d[last]
        for i in range(last, -1, -1):
            self._weight_grads(i, d, bufs.h[i - 1] if i > 0 else x, bufs, grads[i], stream)
            if i > 0:  # gradient at the layer's input, through the previous ReLU
                layer, (W, _) = self.layout.layers[i], params[i]
                self.gemm(bufs.rows, layer.n_in, layer.n_out)(
                    A=d, B=W, bias=None, mask=bufs.h[i - 1], C=bufs.d[i - 1], M=bufs.rows,
                    N=layer.n_in, K=layer.n_out, trans_a=0, trans_b=0, relu=0, stream=stream,
                )  # fmt: skip
                d = bufs.d[i - 1]

    def _weight_grads(self, i: int, d: Any, x_in: Any, bufs: Activations,
                      grads: tuple[Any, Any], stream: Any) -> None:  # fmt: skip
        """Layer i's dW = dY^T X and db = sum over rows of dY, from its output gradient d."""
        layer, (gW, gb) = self.layout.layers[i], grads
        n_out, n_in, S = layer.n_out, layer.n_in, bufs.splits
        if S > 1 and bufs.counters is not None:  # split-K, its sums and db in one launch
            self.ops.gemm_splitk(A=d, B=x_in, dY=d, P=bufs.work, C=gW, db=gb,
                                 counters=bufs.counters, M=n_out, N=n_in, K=bufs.rows, trans_a=1,
                                 trans_b=0, splits=S, with_bias=1, stream=stream)  # fmt: skip
        elif S > 1:  # dW = dY^T X over many rows and few outputs: split K across blocks
            self.ops.gemm_partial(A=d, B=x_in, P=bufs.work, M=n_out, N=n_in, K=bufs.rows,
                                  trans_a=1, trans_b=0, splits=S, stream=stream)  # fmt: skip
            self.ops.sum_splits(P=bufs.work, dY=d, C=gW, db=gb, MN=n_out * n_in, splits=S,
                                M=bufs.rows, N=n_out, stream=stream)  # fmt: skip
        else:
            gemm = self.ops.grad_gemm or self.gemm(n_out, n_in, bufs.rows)
            gemm(A=d, B=x_in, bias=None, mask=None, C=gW, M=n_out, N=n_in, K=bufs.rows,
                 trans_a=1, trans_b=0, relu=0, stream=stream)  # fmt: skip
            self.ops.bias_grad(dY=d, db=gb, M=bufs.rows, N=layer.n_out, stream=stream)
