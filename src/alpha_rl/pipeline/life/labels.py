"""What a run is called and labelled with: params, tags, run name, and the resume compatibility
check (a resumed run must have the checkpoint's config, up to the keys that may change)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf

from alpha_rl import paths
from alpha_rl.build.manifest import Manifest
from alpha_rl.errors import CheckpointError
from alpha_rl.masking import mask
from alpha_rl.pipeline.configure.parts import recorded_init
from alpha_rl.pipeline.evaluation.ledger import UNITS
from alpha_rl.session import Session, cubin_dir

# the `audit` tag of a run whose kernels are the NumPy oracles: nothing to audit them against
ORACLE_AUDIT = "not audited (numpy backend: the kernels are the oracles)"
# keys a resume may change: how long, how often it logs, where it reports, which device runs it
RESUMABLE = ("steps", "resume", "log_every", "tracking.", "checkpoint.", "eval.", "audit.",
             "backend.")  # fmt: skip


def resolved(cfg: DictConfig) -> dict[str, Any]:
    """The run's config as plain data, resolved, without Hydra's own node."""
    data: dict[str, Any] = {}
    for key in cfg:
        if key == "hydra":
            continue
        value = cfg[key]
        is_node = isinstance(value, DictConfig | ListConfig)
        data[str(key)] = OmegaConf.to_container(value, resolve=True) if is_node else value
    return data


def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists stay values."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out |= flatten(value, f"{name}.")
        else:
            out[name] = value
    return out


def config_yaml(cfg: DictConfig) -> str:
    """The resolved config as YAML (the run artifact and the checkpoint's record), with the
    environment's secrets masked in every key and value, numbers included
    (alpha_rl.masking): a value taken from ${oc.env:MLFLOW_TRACKING_PASSWORD} or
    ${oc.decode:${oc.env:PGPASSWORD}} is never written to disk or logged."""
    return yaml.safe_dump(mask(resolved(cfg)), sort_keys=False)


def check_resumable(saved_yaml: str, cfg: DictConfig) -> None:
    """Raise CheckpointError naming each key (beyond RESUMABLE) that differs from the checkpoint."""
    before = flatten(yaml.safe_load(saved_yaml) or {})
    now = flatten(yaml.safe_load(config_yaml(cfg)) or {})  # masked as the checkpoint's is
    differ = sorted(
        k for k in set(before) | set(now)
        if before.get(k) != now.get(k) and not k.startswith(RESUMABLE) and not recorded_init(k)
    )  # fmt: skip
    if differ:
        shown = "; ".join(f"{k}: {before.get(k)!r} -> {now.get(k)!r}" for k in differ[:6])
        raise CheckpointError(
            f"resume: the config differs from the checkpoint's in {len(differ)} key(s): {shown}. "
            "A resumed run keeps its config; only steps, log_every, eval, checkpoint, audit, "
            "tracking and backend may change"
        )


def git_sha() -> str:
    """HEAD of the project's git checkout (+"-dirty" with uncommitted changes), or "unknown"."""
    root = str(paths.project_root())
    try:
        sha = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()  # fmt: skip
        status = ["git", "-C", root, "status", "--porcelain", "--untracked-files=no"]
        dirty = subprocess.run(status, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{sha}-dirty" if dirty else sha


def cubin_hashes(session: Session) -> str:
    """`stem=sha256[:12]` of every cubin the run loaded (empty on the numpy backend)."""
    manifest = Manifest.load(cubin_dir(session.cfg))
    root = manifest.path.parent
    out = []
    for stem, path in sorted(session.runtime.cubins.items()):
        entry = manifest.cubins.get(str(path.relative_to(root)), {})
        out.append(f"{stem}={str(entry.get('cubin_sha256', '?'))[:12]}")
    return " ".join(out)


def tags(session: Session, choices: Mapping[str, str], audit: str) -> dict[str, str]:
    """Variant labels, backend, GPU, git SHA and cubin hashes of a run."""
    cfg, desc = session.cfg, session.backend.describe()
    out = {
        "her": str(choices.get("her", cfg.her.get("name", "?"))),
        "reward_stride": str(cfg.reward.stride),
        "beta": str(choices.get("beta", "?")),
        "seed": str(cfg.seed),
        "market": str(cfg.market.name),
        "experiment": str(choices.get("experiment") or "none"),
        "backend": session.backend.name,
        "backend_reason": session.backend_reason,
        "device": desc.get("gpu", desc.get("cpu", "?")),
        "git_sha": git_sha(),
        "audit": audit,
    }
    hashes = cubin_hashes(session)
    if hashes:
        out["cubins"] = hashes
    return out


def money_units(cfg: DictConfig) -> dict[str, str]:
    """What the PnL metrics and the rewards are measured in (MLflow params `units.*`)."""
    env, currency = cfg.env, cfg.market.currency
    pnl = (f"{currency}: price move ({currency}) x env.multiplier {env.multiplier:g} x env.lot "
           f"{env.lot:g} per position, fees {env.fee_per_lot:g} {currency} per lot per fill; "
           f"trade/pnl sums the trades the env.num_envs={env.num_envs} envs closed in a log "
           f"interval (before fees), eval/pnl the held-out ledger of eval.num_envs="
           f"{cfg.eval.num_envs} envs over eval.steps={cfg.eval.steps} steps (net of spread and "
           "fees, open positions closed at the end)")  # fmt: skip
    reward = (f"reward = sum of w_c x component ({currency}, as PnL) x reward.scale "
              f"{cfg.reward.scale}")  # fmt: skip
    ledger = {f"units.eval.{name}": what.format(ccy=currency) for name, what in UNITS.items()}
    return {"units.pnl": pnl, "units.reward": reward} | ledger


# the variant groups a run name shows when a run's choice differs from conf/train.yaml's
NAMED_GROUPS = ("beta", "alpha", "agent", "reward")


def default_choices() -> dict[str, str]:
    """Each config group's default option, as conf/train.yaml's defaults list names it."""
    out: dict[str, str] = {}
    for entry in OmegaConf.load(paths.conf_dir() / "train.yaml").get("defaults", []):
        if isinstance(entry, DictConfig):
            out |= {str(k): str(v) for k, v in entry.items()}
    return out


def variant_label(cfg: DictConfig, choices: Mapping[str, str]) -> str:
    """What sets a run apart from its siblings: `her-<her>`, then each variant group whose choice
    is not the default (`beta-active`, `alpha-on`, `agent-rainbow`, `reward-stride6`), then the
    search trial it runs (`t14`)."""
    defaults = default_choices()
    parts = [f"her-{choices.get('her', '?')}"]
    parts += [f"{g}-{choices[g]}" for g in NAMED_GROUPS
              if choices.get(g) not in (None, defaults.get(g))]  # fmt: skip
    if cfg.get("search", {}).get("trial") is not None:
        parts.append(f"t{cfg.search.trial}")
    return " ".join(parts)


def curves_title(cfg: DictConfig, choices: Mapping[str, str], run_dir: Path) -> str:
    """`her-on, seed 0, market synthetic_waves (single split) - outputs/...`: what a run's
    curves show, in words (the environment's secrets masked: it is drawn on curves.png)."""
    preset = choices.get("experiment") or choices.get("hparams_search")
    fold = cfg.market.get("fold")
    market = str(cfg.market.name)
    if market == "file":
        market = f"file {Path(str(cfg.market.path)).name}"
    parts = [variant_label(cfg, choices), f"seed {cfg.seed}", f"market {market}"]
    parts += [f"fold {fold}"] if fold is not None else []
    parts += [f"experiment {preset}"] if preset else []
    return mask(f"{', '.join(parts)}  ({run_dir})")


def run_name(cfg: DictConfig, choices: Mapping[str, str]) -> str:
    """`{variant} s{seed}[ f{fold}]` (`her-on s0`, `her-off agent-rainbow s1 f2`): what tells a
    run from the others of its sweep, short enough for a chart's legend. The market, the preset
    and the start are the run's tags (`market`, `experiment`) and its start time."""
    fold = cfg.market.get("fold")
    where = f"s{cfg.seed}" + (f" f{fold}" if fold is not None else "")
    return f"{variant_label(cfg, choices)} {where}"
