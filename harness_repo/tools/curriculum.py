"""Task sampling weights per difficulty level for the next phase: ``weights(levels, base, history)``.

``base`` is harness.yaml's curriculum_weights; ``history`` maps each level to what the last phase saw there.
Its fields, and the rules the weights must follow: EvoTrainer's harness_repo/README.md, "curriculum.py".
The seed harness samples levels by the configured weights, unchanged.
"""


def weights(levels: list[str], base: dict[str, float], history: dict[str, dict]) -> dict[str, float]:
    return {level: float(base.get(level, 1.0)) for level in levels}
