"""alpha_rl's Hydra sweeper plugin (Hydra loads sweepers from the hydra_plugins package)."""
