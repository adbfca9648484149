"""Task sampling weights per difficulty level for the next phase.

``base`` is harness.yaml's curriculum_weights; ``history`` maps each level to what the last phase saw there
(reward_mean, solved_rate, n). The seed harness samples levels by the configured weights, unchanged.
"""


def weights(levels: list[str], base: dict[str, float], history: dict[str, dict]) -> dict[str, float]:
    return {level: float(base.get(level, 1.0)) for level in levels}
