"""The Engineer's code-only harness edit: the reward component that disagrees with the verifier, rewritten to pay what
the evaluator's rule pays.

The code domain's answers are function bodies the framework runs on the task's visible tests before rewards (the
sample's ``execution``: status, tests passed, total; harness_repo/README.md, "rewards.py"); the evaluator's verifier
accepts a body when its execution on the hidden tests ends ``ok``, every test passed
(``evotrainer.domains.code.CodeDomain.verify``). Harness code cannot run the hidden tests, so the aligned reward pays
the same verdict on the tests it may see: 1 for an execution that ended ``ok`` with every visible test passed, else 0
(:data:`PASSED`, written into the code it generates: the sandboxed harness cannot import this module). A timeout, a
failing run, a partial pass, a syntax error, no code and a grader error all earn 0, and nothing the completion's text
says counts.

Which component (both directions, generic in its name and why it disagrees):
:func:`agents.move_kit.disagreeing_component`, with a correctness check being a component that reads the execution
(:func:`agents.move_kit.reads_the_execution`). The move has math's name (``verifier_aligned_reward``), so the Critic
and the resume rules treat it alike in either domain.

Try it alone (prints the edit's diff against the code seed harness, a diagnosis naming its one component)::

    python -m agents.domains.code
"""

from __future__ import annotations

from agents.move_kit import Files, Intervention, disagreeing_component, marker, reads_the_execution, replace_function
from evotrainer.harness.knobs import Knobs

# the evaluator's verdict, on the execution the sample carries (binds nothing; a boolean expression)
PASSED = 'execution.get("status") == "ok" and execution.get("passed") == execution.get("total", -1)'


def _verified_run(func: str) -> str:
    """``func`` rewritten to pay the evaluator's verdict on the visible tests (same name: its weight and
    registration stay)."""
    return f'''def {func}(sample: dict) -> float:
    """1 when the executor ran the body and every visible test passed (status ok), else 0: the evaluator's rule on
    the tests the harness may see. A timeout, a failing or partial run and the completion's text earn nothing."""
    {marker("verifier_aligned_reward")}
    execution = sample.get("execution") or {{}}
    return 1.0 if {PASSED} else 0.0
'''


def _verifier_aligned(files: Files, knobs: Knobs, ctx: dict) -> Files | None:
    """Rewrite the reward component the diagnosis names as disagreeing with the verifier to pay the evaluator's
    verdict, in place (one variable); None when the evidence names none."""
    src = files["rewards.py"]
    func = disagreeing_component(src, knobs, ctx, reads_the_execution, "verifier_aligned_reward")
    return None if func is None else {"rewards.py": replace_function(src, func.name, _verified_run(func.name))}


INTERVENTIONS: list[Intervention] = [
    Intervention(
        "verifier_aligned_reward", 45, ("reward_disagreement",), "rewards.*", "reward_verified_auc", "up", False,
        "the reward component that pays bodies the verifier rejects, or misses right ones, is rewritten to pay what "
        "the evaluator's rule pays: status ok with every visible test passed",
        "a reward that pays a timeout, a partial pass or a body that only runs teaches the policy to produce it; one "
        "that misses passing bodies trains the policy away from them", _verifier_aligned),
]


if __name__ == "__main__":
    import difflib
    from types import SimpleNamespace

    from evotrainer.harness.knobs import read_knobs
    from evotrainer.harness.repo import HARNESS_FILES, seed_dir

    seed = seed_dir("code")
    files = {name: (seed / name).read_text() for name in HARNESS_FILES}
    cited_ = (("rewarded_but_wrong", 0.5), ("correct_but_unrewarded", 0.0), ("credits_wrong:passes_visible", 1.0))
    ctx = {"diagnosis": SimpleNamespace(evidence=[SimpleNamespace(name=n, value=v) for n, v in cited_])}
    for intervention in INTERVENTIONS:
        for name, text in (intervention.edit(files, read_knobs(seed), ctx) or {}).items():
            print("".join(difflib.unified_diff(files[name].splitlines(True), text.splitlines(True),
                                               f"seed/{name}", f"{intervention.name}/{name}")))
