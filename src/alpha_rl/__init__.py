"""alpha_rl: a configuration-driven experiment platform for a GPU-native deep-RL trading agent."""

__version__ = "0.1.0"
