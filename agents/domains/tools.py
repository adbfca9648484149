"""The Engineer's tool-use edits: reward components that charge a rollout for tool calls its answer did not need.

The knob side of the tool-use modes is generic (``agents/knob_moves.py``: ``max_turns`` up for ``turn_cap_hit``, down
for ``tool_spam``, only where harness.yaml sets a turn cap); these are the code side. Each is a cost, a reward
component in [-1, 0] weighing :data:`COST_WEIGHT`: it orders rollouts that are equally right or wrong (so an all-wrong
group where some rollouts call cleanly gains reward spread) and never lifts a wrong answer above a right one. Their
mirror is the playbook's component removal (``remove_reward:<name>``).

How the edited harness code reads a rollout (it runs in the sandbox and cannot import this module): the turn figures
every sample carries (``tool_calls``, ``tool_errors``: harness_repo/README.md, "rewards.py"; 0 in a single-turn
domain, where both costs are 0), and, for repeated calls, the domain's call syntax written into the code from the
evaluator's own pattern (:data:`evotrainer.domains.tools.CALL`), as ``agents.domains.math`` writes its answer rule.

Try it alone (prints each edit's diff against the tools seed harness)::

    python -m agents.domains.tools
"""

from __future__ import annotations

from agents.move_kit import Intervention, marker
from agents.playbook import reward_component
from evotrainer.domains.tools import CALL

# a fifth of a right answer's reward (the seed's `correct` weighs 1): a cost is at most its weight, so a right answer
# that erred still outranks any wrong one; the math domain's format shaping weighs the same
COST_WEIGHT = 0.2

_ERROR_COST = f'''def tool_error_cost(sample: dict) -> float:
    """Minus the share of the rollout's tool calls the environment answered with an error (0 without calls)."""
    {marker("tool_error_cost")}
    calls = sample.get("tool_calls", 0)
    return -sample.get("tool_errors", 0) / calls if calls else 0.0
'''

_REPEAT_COST = f'''def repeat_call_cost(sample: dict) -> float:
    """Minus the share of the rollout's tool calls that repeat one it already made: the tool answers the same call
    the same way, so a repeat tells the policy nothing (0 without calls)."""
    {marker("repeat_call_cost")}
    import re

    calls = [arguments.strip() for arguments in re.findall({CALL.pattern!r}, sample["completion"])]
    return -(len(calls) - len(set(calls))) / len(calls) if calls else 0.0
'''

INTERVENTIONS: list[Intervention] = [
    Intervention(
        "tool_error_cost", 42, ("tool_errors",), "rewards.tool_error_cost", "dead_group_ratio", "down", False,
        "a rollout pays a small cost for the share of its tool calls the environment answered with an error",
        "among rollouts equally right or wrong, those that call cleanly then earn more: all-wrong groups gain reward "
        "spread, and the advantage points away from calls the environment cannot serve",
        reward_component("tool_error_cost", COST_WEIGHT, _ERROR_COST, "tool_error_cost"),
        moves="add", no_mirror="remove_reward:tool_error_cost is the way back"),
    Intervention(
        "repeat_call_cost", 43, ("tool_spam",), "rewards.repeat_call_cost", "dead_group_ratio", "down", False,
        "a rollout pays a small cost for the share of its tool calls that repeat one it already made",
        "a repeated call returns what the rollout already has: charging it makes rollouts that call only what they "
        "need earn more than those that spend turns and tokens calling again",
        reward_component("repeat_call_cost", COST_WEIGHT, _REPEAT_COST, "repeat_call_cost"),
        moves="add", no_mirror="remove_reward:repeat_call_cost is the way back"),
]


if __name__ == "__main__":
    import difflib

    from evotrainer.harness.knobs import read_knobs
    from evotrainer.harness.repo import HARNESS_FILES, seed_dir

    seed = seed_dir("tools")
    files = {name: (seed / name).read_text() for name in HARNESS_FILES}
    for intervention in INTERVENTIONS:
        for name, text in (intervention.edit(files, read_knobs(seed), {}) or {}).items():
            print("".join(difflib.unified_diff(files[name].splitlines(True), text.splitlines(True),
                                               f"seed/{name}", f"{intervention.name}/{name}")))
