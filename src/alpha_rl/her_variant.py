"""Which hindsight directions a run has, decoded once from the config's (or a recorded run's)
her.enabled / her.backward / her.forward into one typed value that the HER part, its ISV slots,
the trainer and the kill check read. It imports nothing: every layer may use it."""

from __future__ import annotations

import enum


class HerVariant(enum.Enum):
    """off | backward | forward | on (both directions), as conf/her/ names them."""

    OFF = "off"
    BACKWARD = "backward"
    FORWARD = "forward"
    ON = "on"

    @property
    def backward(self) -> bool:
        """Backward injection at trade closes (her_inject pushes)."""
        return self in (HerVariant.BACKWARD, HerVariant.ON)

    @property
    def forward(self) -> bool:
        """Forward judgement of closed trades `lookahead` steps later (the ring, her_forward)."""
        return self in (HerVariant.FORWARD, HerVariant.ON)

    @classmethod
    def decode(cls, enabled: bool, backward: bool, forward: bool) -> HerVariant | None:
        """The variant of the three flags; None for a combination no conf/her/ file makes
        (enabled without a direction, or a direction while disabled)."""
        if not enabled:
            return None if backward or forward else cls.OFF
        return {(True, True): cls.ON, (True, False): cls.BACKWARD,
                (False, True): cls.FORWARD}.get((backward, forward))  # fmt: skip


# the treatments of the HER axis in the order the seed plan names them
TREATMENTS = (HerVariant.BACKWARD, HerVariant.FORWARD, HerVariant.ON)
