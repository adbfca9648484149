"""Which process this is among those training one phase: its rank and how many there are (``accelerate launch``
sets RANK and WORLD_SIZE; a phase trained in the service's own process is rank 0 of 1). Read by ``grpo.py`` and
``launch.py`` alike, so neither imports the other for it.
"""

from __future__ import annotations

import os


def rank() -> int:
    """This process's rank among those training the phase (0 when it trains alone)."""
    return int(os.environ.get("RANK", "0"))


def world() -> int:
    """How many processes train the phase together (1 when it trains alone)."""
    return int(os.environ.get("WORLD_SIZE", "1"))
