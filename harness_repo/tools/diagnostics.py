"""Diagnostic metrics of a phase's rollouts, each with an alert threshold. The registry grows over the run.

``METRICS`` maps a name to ``{fn, min, max, help}``; ``fn(rollouts) -> float`` sees every rollout of the phase
(fields: EvoTrainer's harness_repo/README.md, "The rollout view", kept included). A backtest fails a
candidate that drops a metric registered here or pushes one past its threshold.
"""

METRICS: dict[str, dict] = {}


def metric(name: str, *, max: float | None = None, min: float | None = None, help: str = ""):
    def register(fn):
        METRICS[name] = {"fn": fn, "max": max, "min": min, "help": help}
        return fn

    return register


@metric("kept_fraction", min=0.05, help="share of rollouts the filters let train")
def kept_fraction(rollouts: list[dict]) -> float:
    return sum(r["kept"] for r in rollouts) / max(len(rollouts), 1)


@metric("truncation_rate", max=0.5, help="share of completions cut at max_completion_length")
def truncation_rate(rollouts: list[dict]) -> float:
    return sum(r["truncated"] for r in rollouts) / max(len(rollouts), 1)


@metric("turn_cap_rate", max=0.5, help="share of rollouts the turn cap stopped while they still called the tool")
def turn_cap_rate(rollouts: list[dict]) -> float:
    return sum(r["hit_turn_cap"] for r in rollouts) / max(len(rollouts), 1)


@metric("tool_error_rate", max=0.5, help="share of tool calls the environment answered with an error")
def tool_error_rate(rollouts: list[dict]) -> float:
    return sum(r["tool_errors"] for r in rollouts) / max(sum(r["tool_calls"] for r in rollouts), 1)
