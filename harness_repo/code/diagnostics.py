"""Diagnostic metrics of a phase's rollouts, each with an alert threshold. The registry grows over the run.

``METRICS`` maps a name to ``{fn, min, max, help}``; ``fn(rollouts) -> float`` sees every rollout of the phase
(fields: EvoTrainer's harness_repo/README.md, "The rollout view", kept included; the code domain adds
``execution``). A backtest fails a candidate that drops a metric registered here or pushes one past its threshold.
"""

METRICS: dict[str, dict] = {}


def metric(name: str, *, max: float | None = None, min: float | None = None, help: str = ""):
    def register(fn):
        METRICS[name] = {"fn": fn, "max": max, "min": min, "help": help}
        return fn

    return register


def _status_share(rollouts: list[dict], status: str) -> float:
    return sum((r.get("execution") or {}).get("status") == status for r in rollouts) / max(len(rollouts), 1)


@metric("kept_fraction", min=0.05, help="share of rollouts the filters let train")
def kept_fraction(rollouts: list[dict]) -> float:
    return sum(r["kept"] for r in rollouts) / max(len(rollouts), 1)


@metric("truncation_rate", max=0.5, help="share of completions cut at max_completion_length")
def truncation_rate(rollouts: list[dict]) -> float:
    return sum(r["truncated"] for r in rollouts) / max(len(rollouts), 1)


@metric("grader_error_rate", max=0.05, help="share of completions the executor itself failed to run")
def grader_error_rate(rollouts: list[dict]) -> float:
    return _status_share(rollouts, "grader_error")


@metric("timeout_rate", max=0.5, help="share of completions whose code ran past its time limit")
def timeout_rate(rollouts: list[dict]) -> float:
    return _status_share(rollouts, "timeout")
