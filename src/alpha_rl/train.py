"""`alpha-rl-train` / `python -m alpha_rl.train`: the Hydra entry point over conf/train.yaml."""

from __future__ import annotations

import logging
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from alpha_rl import paths
from alpha_rl.errors import AlphaRlError
from alpha_rl.session import open_session

log = logging.getLogger("alpha_rl")


def run(cfg: DictConfig) -> None:
    """One job: validate the composed config, set up the backend and the device ISV, report."""
    try:
        with open_session(cfg, HydraConfig.get().runtime.choices) as session:
            log.info("config:\n%s", OmegaConf.to_yaml(cfg, resolve=True))
            log.info("%s", session.isv.layout.table())
            log.info("kernels bound: %s", ", ".join(sorted(session.kernels)))
            log.info(
                "configuration, ISV and kernels validated; this version has no training "
                "loop yet, so no steps were run"
            )
    except AlphaRlError as exc:
        log.error("%s", exc)
        sys.exit(2)


def main() -> None:
    """Console entry point: Hydra parses the command line (overrides, -m for sweeps)."""
    try:
        config_path = str(paths.conf_dir())
    except AlphaRlError as exc:
        print(f"alpha-rl-train: {exc}", file=sys.stderr)
        sys.exit(2)
    hydra.main(version_base="1.3", config_path=config_path, config_name="train")(run)()


if __name__ == "__main__":
    main()
