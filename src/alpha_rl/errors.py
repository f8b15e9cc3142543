"""Errors a user can cause. Each message says what went wrong and what to do about it."""

from alpha_rl.masking import mask


class AlphaRlError(Exception):
    """Base class of every error alpha_rl raises on purpose. Its message has the environment's
    secrets masked (alpha_rl.masking), wherever it is shown or recorded: an error that
    echoes a config value (agent.lr='***', a market file's path) never holds one in clear."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(mask(arg) for arg in args))


class ConfigError(AlphaRlError):
    """A composed configuration is invalid (bad value, missing key, impossible combination)."""


def require(checks: list[tuple[bool, str]], where: str) -> None:
    """Raise ConfigError with the first failing check's message, pointing at `where`."""
    for ok, message in checks:
        if not ok:
            raise ConfigError(f"{message} (see {where})")


class MarketDataError(ConfigError):
    """A market data file or generator setting is unusable (the message names file, row, column)."""


class IsvLayoutError(ConfigError):
    """The composed ISV slot layout is inconsistent (clash, out of range, required slot missing)."""


class ReplayError(AlphaRlError):
    """The replay buffer was used in a way it cannot serve (an empty sample, an oversized push)."""


class BackendError(AlphaRlError):
    """A compute backend cannot be created or used (no GPU, no pycuda, context trouble)."""


class CubinError(AlphaRlError):
    """A cubin is missing, stale, or was built with settings other than the configured ones."""


class BuildError(AlphaRlError):
    """nvcc failed or the build inputs are inconsistent."""


class KernelCallError(AlphaRlError):
    """A kernel was called with arguments that disagree with its declaration."""


class ContractError(AlphaRlError):
    """A kernel's Python declaration disagrees with the parameter list nvcc compiled."""


class DivergenceError(AlphaRlError):
    """The loss or the network parameters became NaN or infinite; the run stops as FAILED."""


class CheckpointError(AlphaRlError):
    """A checkpoint is missing, unreadable or does not fit the configured run."""


class WriteError(AlphaRlError):
    """A run's own record (diag.jsonl, or diag.jsonl cut back for a resume) could not be
    written: a full disk, a read-only file system. What was written before stays valid; the run
    stops FAILED. (A checkpoint that cannot be written is a CheckpointError.)"""
