"""Criterion 6: runs that broke. A run broke when it failed (its failure tag), a value of
loss/l_q or of the stability metric is NaN / inf, or one of them blew up; the treatment's share
of broken runs is tested against the baseline's (Fisher's exact), and held within a margin of it
(Farrington-Manning)."""

from __future__ import annotations

import numpy as np

from alpha_rl.killcheck.config import Criteria
from alpha_rl.killcheck.criteria import FAILURE_TAG, PENDING, Judgement, Test
from alpha_rl.killcheck.fmt import fmt_p
from alpha_rl.killcheck.pairs import Pair
from alpha_rl.killcheck.rates import p_within, seeds_within
from alpha_rl.killcheck.stats import fisher_floor, fisher_greater, fisher_seeds
from alpha_rl.tracking import RunRecord
from alpha_rl.vocabulary import L_Q

BROKEN = "6 runs that broke (rate)"


def broke(run: RunRecord, crit: Criteria) -> str | None:
    """Why a run broke, or None: it failed (its failure tag), a value of loss/l_q or of the
    stability metric is NaN / inf, or one of them blew up (its max over the last `window` of the
    run above `blowup_factor` x the series' own median over the run). Judged on each run alone,
    so the two arms are measured alike."""
    key = ("broke", crit.window, crit.blowup_factor, crit.stability_metric)
    if key not in run.cache:
        run.cache[key] = _broke(run, crit)
    return run.cache[key]


def _broke(run: RunRecord, crit: Criteria) -> str | None:
    if FAILURE_TAG in run.tags:
        return run.tags[FAILURE_TAG]
    for key in dict.fromkeys((L_Q, crit.stability_metric)):
        steps, values = run.series(key)
        if not values.size:
            continue
        # MLflow's SQL stores keep +-inf as +-float max: those are infinite too
        if not (np.abs(values) < np.finfo(np.float64).max).all():
            return f"non-finite {key}"
        late = values[steps >= (1 - crit.window) * run.last_step]
        median = float(np.median(values))
        if late.size and median > 0 and late.max() / crit.blowup_factor > median:
            return (f"{key} blew up: max {late.max():.4g} over the window > "
                    f"{crit.blowup_factor:g} x its median {median:.4g}")  # fmt: skip
    return None


def judge_broken(pairs: list[Pair], labels: tuple[str, str], crit: Criteria) -> Judgement:
    """The treatment's runs break more often than the baseline's: Fisher's exact test on the
    counts (one-sided), so one diverged run is a rate, not a verdict."""
    treated = list({t.run_id: t for t, _ in pairs}.values())
    bases = list({b.run_id: b for _, b in pairs}.values())
    why_t = {r.run_id: w for r in treated if (w := broke(r, crit))}
    why_b = {r.run_id: w for r in bases if (w := broke(r, crit))}
    counts = (len(why_t), len(treated), len(why_b), len(bases))
    p = fisher_greater(*counts)
    tl, bl = labels
    value = (f"{counts[0]} of {counts[1]} {tl} runs broke vs {counts[2]} of {counts[3]} {bl} "
             f"({fmt_p(p)})")  # fmt: skip
    if why_t:
        value += f": {next(iter(why_t.values()))}"
    safe = p_within(*counts, crit.broken_margin)
    value += f"; within +{crit.broken_margin:g}: p {safe:.2g}"
    threshold = (f"KILL: broken share shown above the baseline's (Fisher's exact); within: shown "
                 f"at most {crit.broken_margin:g} above it (Farrington-Manning)")  # fmt: skip
    evidence = {"treatment_broken": why_t, "baseline_broken": why_b, "counts": counts,
                "margin": crit.broken_margin, "p_within": safe}  # fmt: skip
    test = Test(p, lambda level: fisher_seeds(*counts, level), "runs per arm",
                "the treatment broke no more often than the baseline: nothing for more runs to "
                "decide", fisher_floor(*counts), safe,
                lambda level: seeds_within(*counts, crit.broken_margin, level))  # fmt: skip
    return Judgement(BROKEN, value, threshold, PENDING, True, evidence, test=test)
