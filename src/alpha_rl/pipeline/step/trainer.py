"""The step of DESIGN §9 over one run's environment, replay, learner and hindsight.

`Trainer.step()` launches the kernels of one env step in the contract's order and copies
nothing to the host, on either backend; `Trainer.read_log_point()` is the throttled read of the
ISV and the diagnostics (step 12). `audited_step()` is the same step with the env, n-step,
PER-push and HER launches checked against their oracles on that step's real data (cuda
backend).

With `backend.graph` on the cuda backend, the first step once learning has started is captured
into a CUDA graph and every later step replays it: the same launches with the same arguments
(everything that changes between steps lives on the device), without the host cost of each
checked launch. Audited steps launch eagerly, on the same stream.
"""

from __future__ import annotations

import functools
import logging
from concurrent.futures import Executor
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from alpha_rl import vocabulary as vocab
from alpha_rl.agent import Learner, aux_calls
from alpha_rl.backend.base import DeviceArray
from alpha_rl.backend.graph import Graph, graphs_available
from alpha_rl.env import Environment
from alpha_rl.errors import BackendError, DivergenceError
from alpha_rl.her_variant import DIRECTIONS
from alpha_rl.hindsight import DIRECTION_FLAGS, STEP_COUNTS, Hindsight, ring_for
from alpha_rl.hindsight import KERNELS as HER_KERNELS
from alpha_rl.kernels import aux, experience, mlp, nstep, per
from alpha_rl.kernels.audit import KernelAudit
from alpha_rl.kernels.reward import RC_CORE, has_aux_align
from alpha_rl.market.book import Book
from alpha_rl.nstep import NStep, OneStep
from alpha_rl.pipeline.configure.plan import Plan
from alpha_rl.pipeline.step.stages import STAGES
from alpha_rl.portable import mean
from alpha_rl.replay import Replay
from alpha_rl.session import Session
from alpha_rl.vocabulary import GRAD_NORM, L_Q, L_Q_REAL, TRAIN_CAPTURE

F32 = np.float32
log = logging.getLogger("alpha_rl")
# the TF32 products (launched only with agent.precision=tf32) are held to their bound
AUDITED = (experience.ENV_STEP.name, nstep.ACCUMULATE.name, per.PUSH.name, *HER_KERNELS,
           *(d.name for d in mlp.TF32_KERNELS))  # fmt: skip
# HER totals whose growth since the last log point is logged as well
HER_INTERVALS = (*DIRECTIONS, "overwritten", "expired")


class Trainer:
    """Environment, replay, learner and (unless her='off') hindsight of one run."""

    def __init__(self, session: Session, book: Book, plan: Plan) -> None:
        self.session, self.plan = session, plan
        rt, isv, seed = session.runtime, session.isv, plan.run.seed
        self.rc_stride = int(session.cfg.reward.stride)
        self.env = Environment(plan.env, book, rt, isv, seed, self.rc_stride)
        B, H = self.env.num_envs, self.env.obs_dim
        n_step = plan.agent.n_step
        self.replay = Replay(plan.replay, H, rt, seed, plan.max_push, isv, discounts=n_step > 1)
        self.transitions = (NStep(n_step, self.env, rt, isv) if n_step > 1
                            else OneStep(self.env))  # fmt: skip
        self.learner = Learner(plan.agent, H, B, plan.replay.batch_size, rt, isv, seed,
                               plan.alpha)  # fmt: skip
        self.controller = None
        if plan.beta.controller == "share":  # w_aux_align steered by c6's share (cuda/aux.cu)
            at = isv.layout.index
            self.controller = functools.partial(
                rt.bind(aux.CONTROLLER),
                isv=isv.array,
                aux_ema_idx=at(vocab.SLOT_REWARD_AUX_ALIGN_EMA),
                abs_idx=at(vocab.SLOT_REWARD_ABS_EMA),
                weight_idx=at(vocab.SLOT_REWARD_WEIGHT),
                core=RC_CORE,
                w_idx=at(vocab.SLOT_W_AUX_ALIGN),
                share_idx=at(vocab.SLOT_AUX_SHARE),
                numbers_idx=at(vocab.SLOT_BETA_CONTROLLER),
            )
        self.hindsight = (
            Hindsight(plan.her, self.env, self.replay, rt, isv) if plan.her is not None else None
        )
        her = plan.her
        if her is not None and her.forward and her.closed_ring < ring_for(B, her.lookahead):
            log.warning(
                "her.closed_ring=%d holds fewer than the %d closes %d envs can make in one "
                "lookahead (%d steps) and the step that records them: trades overwritten before "
                "they come due are never judged by forward HER (counted as "
                "her/forward_overwritten); her.closed_ring=auto sizes it (%d here)",
                her.closed_ring, B * (her.lookahead + 1), B, her.lookahead,
                ring_for(B, her.lookahead),
            )  # fmt: skip
        self.h_t, self.h_tp1 = rt.backend.zeros(B * H, F32), rt.backend.zeros(B * H, F32)
        # whether h_tp1 holds the observation of the envs' current state (set by a step; cleared
        # when the env state is written from outside, e.g. by a checkpoint's restore)
        self.observed = False
        self.t = 0  # env steps done
        self.stream: Any = session.stream
        self.use_graph = plan.backend.graph and session.backend.name == "cuda"
        self.graph: Graph | None = None
        if self.use_graph and not graphs_available():
            raise BackendError(
                "backend.graph=true needs cuda-bindings (pip install -e '.[gpu]' installs it); "
                "or run with backend.graph=false to launch the kernels one by one"
            )
        # HER's totals at the last log point: the interval's counts are the difference
        self._her_seen = dict.fromkeys(HER_INTERVALS, 0)
        self._overwrite_warned = False

    @property
    def backend(self) -> Any:
        return self.session.backend

    # --- the step (DESIGN §9) ---
    def step(self) -> None:
        """One env step of every env, then the learner's updates; no device->host copy."""
        if self.graph is None and self.graph_ready:
            self.graph = Graph(self.stream, self.launch_step)
        if self.graph is not None:
            self.graph.launch()
        else:
            self.launch_step()
        self.t += 1

    def record_step(self) -> list:
        """What one step queues, recorded instead of launched (kernels/tape.py): a Lockstep
        launches it beside its other agents' (pipeline/step/lockstep.py)."""
        with self.session.runtime.recording() as tape:
            self.launch_step()
        return tape

    def launch_step(self) -> None:
        """Queue one step (DESIGN §9) on the trainer's stream: its stages in the contract's
        order (pipeline/step/stages.py)."""
        for stage in STAGES:
            stage.issue(self, self.stream)
        self.observed = True

    @property
    def learning(self) -> bool:
        """Whether the step about to run updates the Q-network."""
        return self.t >= self.plan.agent.learn_start

    @property
    def graph_ready(self) -> bool:
        """Whether its step may be captured as a CUDA graph and replayed from now on: graphs on,
        learning, and the envs observed (the launches are then the same at every step)."""
        return self.use_graph and self.learning and self.observed

    def audited_step(self, judges: Executor | None = None) -> KernelAudit:
        """`step()` with the env, n-step, PER-push and HER kernels (and the TF32 products)
        checked against their oracles (in `judges`, a thread pool, when given: see
        KernelAudit.ready)."""
        with self.auditing(judges) as audit:
            self.launch_step()
            self.t += 1
        return audit

    def auditing(self, judges: Executor | None = None) -> AbstractContextManager[KernelAudit]:
        """Within the block, the launches of the audited kernels (AUDITED) are checked against
        their oracles (a step recorded meanwhile carries the audit to its launch: a Lockstep
        audits its agents' merged launches at once)."""
        return self.session.runtime.auditing(AUDITED, judges)

    def close(self) -> None:
        """Free the step's CUDA graph (before the backend closes)."""
        if self.graph is not None:
            self.graph.close()

    # --- the log point (step 12) ---
    def read_log_point(self) -> tuple[dict[str, float], dict[str, Any]]:
        """Metrics of DESIGN §10 keyed by name, and the diag blocks of the JSONL line (call
        `check_finite` on the metrics once they are recorded)."""
        isv = self.backend.download(self.session.isv.array)
        layout = self.session.isv.layout
        slot = lambda name: float(isv[int(layout.index(name))])  # noqa: E731
        m: dict[str, float] = {vocab.EPSILON: slot(vocab.SLOT_EPSILON)}
        if self.t > self.plan.agent.learn_start:  # l_q exists once an update has run
            m |= {L_Q: slot(vocab.SLOT_LOSS_Q), GRAD_NORM: slot(vocab.SLOT_GRAD_NORM),
                  vocab.BATCH_SYNTHETIC: slot(vocab.SLOT_BATCH_SYNTHETIC),
                  vocab.REPLAY_BETA: slot(vocab.SLOT_PER_BETA)}  # fmt: skip
            by_source = {L_Q_REAL: slot(vocab.SLOT_LOSS_Q_REAL),
                         vocab.L_Q_SYNTHETIC: slot(vocab.SLOT_LOSS_Q_SYNTHETIC)}  # fmt: skip
            m |= {k: v for k, v in by_source.items() if not np.isnan(v)}  # NaN: no such row
        m[vocab.L_AUX] = slot(vocab.SLOT_LOSS_AUX)
        ema = int(layout.index(vocab.SLOT_REWARD_COMPONENT_EMA))
        m |= {f"reward/ema_c{k}": float(isv[ema + k]) for k in range(RC_CORE)}
        if has_aux_align(self.rc_stride):
            m["reward/aux_align_ema"] = slot(vocab.SLOT_REWARD_AUX_ALIGN_EMA)
            m[vocab.W_AUX_ALIGN] = slot(vocab.SLOT_W_AUX_ALIGN)
        if self.controller is not None:
            m[vocab.AUX_SHARE] = slot(vocab.SLOT_AUX_SHARE)
        accuracy = self._aux_accuracy()
        if accuracy is not None:
            m[vocab.AUX_ACCURACY] = accuracy
        if self.learner.alpha is not None and self.t > self.plan.agent.learn_start:
            m |= {"aux/w_alpha_long": slot(vocab.SLOT_W_ALPHA_LONG),
                  "aux/w_alpha_short": slot(vocab.SLOT_W_ALPHA_SHORT)}  # fmt: skip
        stats = self.env.harvest_trade_stats()
        m |= {vocab.TRAIN_PNL: stats.realised, TRAIN_CAPTURE: stats.capture_ratio,
              vocab.TRAIN_TRADES: float(stats.trades)}  # fmt: skip
        self.replay.check()  # a batch sampled from an empty buffer is a bug, not a number
        size = self.replay.size()
        synthetic = self.backend.download(self.replay.arrays["s_synthetic"][:size])
        m |= {vocab.REPLAY_SIZE: float(size), vocab.REPLAY_SYNTHETIC: float(mean(synthetic))}
        hindsight = self._hindsight_block(slot)
        m |= {f"her/{k}": float(v) for k, v in hindsight.items() if k != "enabled"}
        aux_keys = (vocab.W_AUX_ALIGN, vocab.AUX_SHARE)
        aux_block = {k.split("/")[1]: v for k, v in m.items()
                     if k.startswith("aux/") or k in aux_keys}  # fmt: skip
        return m, {"hindsight": hindsight, "aux": aux_block}

    def _aux_accuracy(self) -> float | None:
        """The share of envs whose next mid move the aux head called right on the last step
        (p_up > 0.5 for up), over those whose mid moved; None when none moved or no step ran."""
        if self.t == 0:
            return None
        a = self.env.arrays
        right, moved = aux_calls(self.backend, self.learner.p_up, a["fill_mid"], a["post_mid"])
        return right / moved if moved else None

    def _hindsight_block(self, slot: Any) -> dict[str, Any]:
        hs = self.hindsight
        if hs is None:
            return {"enabled": False}
        totals = hs.totals()
        grown = {k: totals[k] - self._her_seen.get(k, 0) for k in HER_INTERVALS if k in totals}
        self._her_seen |= {k: totals[k] for k in grown}
        block: dict[str, Any] = {"enabled": True}
        block |= {name: slot(s) for direction, (s, name) in STEP_COUNTS.items()
                  if direction in hs.cfg.variant.directions}  # fmt: skip
        block |= {
            "threshold": slot(vocab.SLOT_HER_THRESHOLD),
            "priority_boost": slot(vocab.SLOT_HER_PRIORITY_BOOST),
            **{f"{d}_total": totals[d] for d in DIRECTIONS},
            "inject_total": sum(totals[d] for d in DIRECTIONS),
            "inject_interval": sum(grown[d] for d in DIRECTIONS),
        }
        if hs.cfg.forward:
            block |= self._forward_fates(totals, grown)
        return block

    def _forward_fates(self, totals: dict[str, int], grown: dict[str, int]) -> dict[str, Any]:
        """What became of the closed trades forward HER was given, so far and since the last
        log point; the first log point whose share overwritten unjudged passes
        her.max_overwritten warns (once)."""
        her = self.plan.her
        closes, lost = totals["closes"], totals["overwritten"]
        share = lost / closes if closes else 0.0
        if share > her.max_overwritten and not self._overwrite_warned:
            self._overwrite_warned = True
            B = self.env.num_envs
            log.warning(
                "forward HER lost %d of the %d trades closed by step %d (%.1f%%) before judging "
                "them, above her.max_overwritten=%g: its ring of %d (her.closed_ring) holds fewer "
                "than the closes of one lookahead; a ring of %d (her.closed_ring=auto) would hold "
                "them all",
                lost, closes, self.t, 100 * share, her.max_overwritten, her.closed_ring,
                ring_for(B, her.lookahead),
            )  # fmt: skip
        return {
            "forward_closes_total": closes,
            "forward_judged_total": totals["judged"],
            "forward_overwritten": grown["overwritten"],
            "forward_overwritten_total": lost,
            "forward_overwritten_share": share,
            "forward_expired": grown["expired"],
            "forward_expired_total": totals["expired"],
            "forward_ended_total": totals["ended"],
        }

    def finite(self, metrics: dict[str, float]) -> bool:
        """Whether l_q and every network parameter are finite (a parameter read: log points)."""
        if not np.isfinite(metrics.get(L_Q, 0.0)):
            return False
        return bool(np.isfinite(self._parameters()).all())

    def _parameters(self) -> np.ndarray:
        """The learned parameters a finiteness check reads: the Q-network's, then w_α's."""
        theta = self.backend.download(self.learner.state.theta)
        if self.learner.alpha is None:
            return theta
        return np.concatenate([theta, self.backend.download(self.learner.alpha.w)])

    def check_finite(self, metrics: dict[str, float]) -> None:
        """Raise DivergenceError when l_q or any network parameter is NaN or infinite."""
        l_q = metrics.get(L_Q, 0.0)
        if not np.isfinite(l_q):
            raise DivergenceError(f"loss/l_q is NaN or infinite ({l_q}) at step {self.t}")
        theta = self._parameters()
        bad = int(np.count_nonzero(~np.isfinite(theta)))
        if bad:
            what = "Q-network parameters" + (" and w_α" if self.learner.alpha is not None else "")
            raise DivergenceError(
                f"{bad} of {theta.size} {what} are NaN or infinite at step {self.t}"
            )

    # --- state for checkpoints ---
    def state_arrays(self, with_replay: bool) -> dict[str, DeviceArray]:
        """Every device array a resume needs, by checkpoint key `<part>.<name>`: each part's one
        named structure (env, learner state, HER, and the replay when it is saved) and the ISV."""
        parts = {"env": self.env.arrays, "learner": self.learner.state.arrays(),
                 "her": self.hindsight.arrays if self.hindsight is not None else {},
                 "nstep": self.transitions.arrays,
                 "alpha": self.learner.alpha.arrays() if self.learner.alpha is not None else {},
                 "replay": self.replay.arrays if with_replay else {}}  # fmt: skip
        out = {f"{part}.{k}": v for part, arrays in parts.items() for k, v in arrays.items()}
        out["isv"] = self.session.isv.array
        return out

    def host_state(self) -> dict[str, Any]:
        """The host-side counters a resume needs."""
        return {"t": self.t, "her_seen": dict(self._her_seen)}

    def restore_host_state(self, state: dict[str, Any], with_replay: bool) -> None:
        """Set the host-side counters of a checkpoint (after its arrays were written back)."""
        self.t = int(state["t"])
        self.observed = False  # the env's arrays were written: observe them afresh
        # the HER variant's flags are the config's (a resume cannot change the variant): a
        # checkpoint written while they were launch arguments holds 0 in their slots
        self.session.isv.reset(DIRECTION_FLAGS.values())
        if self.graph is not None:  # a captured step would copy the h_tp1 of before the restore
            self.backend.synchronize()
            self.graph.close()
            self.graph = None
        self._her_seen = dict.fromkeys(HER_INTERVALS, 0) | {
            k: int(v) for k, v in state["her_seen"].items()
        }
        self.replay.mark_filled(with_replay and self.t > 0)
