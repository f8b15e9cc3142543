"""Where the project's trees live: conf/, cuda/, build/cubins/."""

from __future__ import annotations

import os
from pathlib import Path

from alpha_rl.errors import ConfigError


def project_root() -> Path:
    """The directory holding conf/ and cuda/ (ALPHA_RL_ROOT, else found above the package)."""
    env = os.environ.get("ALPHA_RL_ROOT")
    if env:
        root = Path(env).resolve()
        if not (root / "conf").is_dir():
            raise ConfigError(f"ALPHA_RL_ROOT={env} has no conf/ directory; unset it or fix it")
        return root
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "conf" / "train.yaml").is_file() and (parent / "cuda").is_dir():
            return parent
    raise ConfigError(
        f"cannot find the alpha_rl project tree (conf/, cuda/) above {here}; "
        "install the package editable from a checkout (`make train` does) or set ALPHA_RL_ROOT"
    )


def conf_dir() -> Path:
    """The Hydra config directory."""
    return project_root() / "conf"


def cuda_dir() -> Path:
    """The directory of kernel sources (`<stem>.cu`) and shared headers (`*.cuh`)."""
    return project_root() / "cuda"


def default_cubin_dir() -> Path:
    """Where `make cubins` writes `sm_<arch>/<stem>[.<variant>].cubin` and the manifest."""
    return project_root() / "build" / "cubins"
