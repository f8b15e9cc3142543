"""MLflow stores built for the kill-check tests: runs with chosen params, tags and metric
histories whose verdicts are known."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from alpha_rl.killcheck.cli import parse, run
from alpha_rl.pipeline.life.labels import ORACLE_AUDIT
from tests.helpers import seeded_store

STEPS = np.arange(500, 12001, 500)  # log points up to 12k env steps
EVALS = np.array([250, 500, 1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000, 11000,
                  12000])  # the early-dense evaluation schedule  # fmt: skip
SEEDS = (0, 1, 2, 3, 4)  # min_seeds pairs
# enough pairs to show harmlessness here: 20 clean runs per arm show a broken share within 0.2
# of the baseline's (Farrington-Manning p 0.013; 5 cannot, p 0.13) and this store's held-out PnL
# within half a pair's spread (its runs' own noise makes a pair's difference sd ~800 USD)
KEEP_SEEDS = tuple(range(20))
HER = {"off": (False, False, False), "backward": (True, True, False),
       "forward": (True, False, True), "on": (True, True, True)}  # fmt: skip
AUDIT_KEYS = {
    "backward": ("her_track", "her_inject"),
    "forward": ("her_track", "her_inject", "her_forward"),
    "on": ("her_track", "her_inject", "her_forward"),
}


def l_q_curve(seed: int, scale: float = 1.0, steps: np.ndarray = STEPS) -> np.ndarray:
    """A decaying loss with seed noise."""
    noise = np.random.default_rng(seed).normal(0, 0.01, steps.size)
    return scale * (0.2 + np.exp(-steps / 3000.0)) + noise


def pnl_curve(seed: int, level: float = 50_000.0, steps: np.ndarray = EVALS) -> np.ndarray:
    """A held-out PnL rising to `level` with seed noise."""
    noise = np.random.default_rng(seed).normal(0, 1000.0, steps.size)
    return level * np.clip(steps / 6000.0, 0, 1) + noise


def seed_effect(seed: int) -> float:
    """The held-out PnL a seed's market windows add to both runs of its pair (USD): runs differ
    more from seed to seed than the two runs of a pair differ."""
    return float(np.random.default_rng(1000 + seed).normal(0, 5000.0))


def ramp(until: float, level: float, steps: np.ndarray = EVALS) -> np.ndarray:
    """A held-out curve rising linearly to `level` at step `until`, flat after."""
    return np.clip(steps / until, 0, 1) * level


class Store:
    """An experiment of runs under one parent run."""

    def __init__(self, tmp_path: Path) -> None:
        self.uri = seeded_store(tmp_path / "mlflow.db")
        self.client = MlflowClient(tracking_uri=self.uri)
        self.eid = self.client.create_experiment("alpha_rl")
        self.parent = self.client.create_run(self.eid, run_name="sweep").info.run_id
        self.forward_counted = True  # false: forward runs as recorded before their ring's counts
        self.numpy_backend = False  # true: runs of the numpy backend (the audit tag, no audits)

    def add(self, seed: int, params: dict[str, str], tags: dict[str, str],
            log: dict[str, np.ndarray], evals: dict[str, np.ndarray]) -> str:  # fmt: skip
        """A finished run: `log` on the log steps, `evals` on the evaluation steps."""
        tags = {"mlflow.parentRunId": self.parent, "probe_digest": f"probe{seed}", **tags}
        rid = self.client.create_run(self.eid, tags=tags).info.run_id
        p = {"seed": str(seed), "agent.lr": "0.0003", **params}
        ms = [Metric(k, float(v), 0, int(s)) for k, vals in log.items()
              for s, v in zip(STEPS, vals, strict=True)]  # fmt: skip
        ms += [Metric(k, float(v), 0, int(s)) for k, vals in evals.items()
               for s, v in zip(EVALS, vals, strict=True)]  # fmt: skip
        self.client.log_batch(rid, params=[Param(k, v) for k, v in p.items()])
        for i in range(0, len(ms), 1000):
            self.client.log_batch(rid, metrics=ms[i : i + 1000])
        self.client.set_terminated(rid)
        return rid

    def her_run(self, her: str, seed: int, log: dict | None = None, evals: dict | None = None,
                run_tags: dict | None = None, **params: str) -> str:  # fmt: skip
        """A run of her=`her` with the metrics of a healthy run, `log` / `evals` / `run_tags` on
        top."""
        enabled, back, fwd = HER[her]
        p = {"her.enabled": str(enabled), "her.backward": str(back), "her.forward": str(fwd),
             **params}  # fmt: skip
        base_log = {"loss/l_q": l_q_curve(seed + 10 * enabled)}
        if enabled:
            p |= {"her.threshold": "1.5", "isv.slots.her.her_threshold.index": "549"}
            base_log |= {"her/inject_total": STEPS * 3.0, "her/backward_total": STEPS * 2.0,
                         "trade/count": np.full(STEPS.size, 5000.0)}  # fmt: skip
            if not self.numpy_backend:
                base_log |= {f"audit/{k}": np.zeros(STEPS.size) for k in AUDIT_KEYS[her]}
        if fwd and self.forward_counted:  # a ring that judged every close it was given
            p |= {"her.max_overwritten": "0.01"}
            base_log |= {"her/forward_closes_total": STEPS * 50.0,
                         "her/forward_overwritten_total": np.zeros(STEPS.size),
                         "her/forward_expired_total": np.zeros(STEPS.size)}  # fmt: skip
        pnl = pnl_curve(seed + 40 + 10 * enabled) + seed_effect(seed)
        base_evals = {"eval/l_q_probe": l_q_curve(seed + 20 + 10 * enabled, 0.5, EVALS),
                      "eval/capture_ratio": ramp(12000 if not enabled else 4000, 0.4),
                      "eval/pnl": pnl}  # fmt: skip
        tags = {"her": her} | ({"audit": ORACLE_AUDIT} if self.numpy_backend else {})
        return self.add(seed, p, tags | (run_tags or {}), base_log | (log or {}),
                        base_evals | (evals or {}))  # fmt: skip

    def ablation(self, treatments=("on",), seeds=SEEDS, log=None, evals=None, base_evals=None,
                 with_base=True, tags=None) -> None:  # fmt: skip
        """Per seed a run of each treatment (`log(her, seed)` / `evals(her, seed)` /
        `tags(her, seed)` change them) and, unless with_base is false, its her=off baseline
        (`base_evals(seed)`)."""
        for seed in seeds:
            for her in treatments:
                self.her_run(her, seed, log(her, seed) if log else None,
                             evals(her, seed) if evals else None,
                             tags(her, seed) if tags else None)  # fmt: skip
            if with_base:
                self.her_run("off", seed, None, base_evals(seed) if base_evals else None)

    def check(self, tmp_path: Path, *args: str) -> tuple[int, dict]:
        out = tmp_path / "report"
        code = run(parse(["--tracking-uri", self.uri, "--parent", self.parent, "--out", str(out),
                          *args]))  # fmt: skip
        return code, json.loads((out / "kill_check.json").read_text())


def rows(report: dict, treatment: str = "on") -> dict[str, dict]:
    """The rows of one treatment by criterion name."""
    found = {t["value"]: t for t in report["treatments"]}[treatment]
    return {r["criterion"]: r for r in found["criteria"]}


def verdicts(report: dict, treatment: str = "on") -> dict[str, str]:
    return {k: r["verdict"] for k, r in rows(report, treatment).items()}


STABILITY = "5 no destabilisation (eval/l_q_probe)"


BROKEN = "6 runs that broke (rate)"
BENEFIT = "7 no held-out harm (eval/pnl)"
DECIDING_HER = (STABILITY, BROKEN, BENEFIT)  # the her axis's statistical rows
HER_DECIDING = ("deciding on the her axis: audits, injections, stability, broken, benefit; KILL: "
                "alpha 0.025 family-wise")  # fmt: skip
KEEP_PART = ("; KEEP: beta 0.1 family-wise (harmlessness shown on every deciding criterion; Holm "
             "over {} treatment{})")  # fmt: skip


def her_header(tests: int, treatments: int = 1) -> str:
    """The table's second line on the her axis: the KILL family's tests, the KEEP family's
    treatments."""
    family = (f"Holm over the check's {tests} test{'' if tests == 1 else 's'}" if tests else
              "no test decided: each row says why")  # fmt: skip
    return (f"{HER_DECIDING} ({family})"
            + KEEP_PART.format(treatments, "" if treatments == 1 else "s"))  # fmt: skip


LAYOUTS = {"stride6": ("6", "sentinel", "0.0"), "stride7_sentinel": ("7", "sentinel", "0.0"),
           "stride7_active": ("7", "active", "0.1"),
           "stride7_active_controller": ("7", "active", "0.1")}  # fmt: skip


def reward_variants(store: Store, seeds=SEEDS, layouts=tuple(LAYOUTS)[:3], evals=None) -> None:
    """experiment=reward_variants: stride6, stride7 + sentinel, stride7 + active per seed (the
    `layouts` named; `evals(layout, seed)` changes a run's held-out metrics)."""
    for seed in seeds:
        for layout in layouts:
            stride, mode, scale = LAYOUTS[layout]
            params = {"reward.stride": stride, "beta.mode": mode, "beta.scale": scale,
                      "isv.slots.beta.aux_align_scale.init": scale}  # fmt: skip
            if stride == "7":
                params |= {"reward.aux_align_weight": "1.0",
                           "isv.slots.reward.w_aux_align.index": "537"}  # fmt: skip
            if layout.endswith("controller"):
                params["beta.controller"] = "share"
            store.her_run("on", seed, evals=evals(layout, seed) if evals else None, **params)
