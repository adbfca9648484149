"""The Engineer's math-only harness edits: reward components and a reward fix that read an integer answer.

These know the math domain's answer format, so they live apart from the generic playbook (and apart from the
evaluator's ``evotrainer/domains/math``, which never imports ``agents``). They are built from the generic
:class:`agents.playbook.Intervention` and its text editors; ``agents.playbook`` (:func:`~agents.playbook.for_domain`)
is the only importer, lazily. ``priority`` places each one in the Engineer's fallback order among the generic
interventions.

How the edited harness code reads an answer (it runs in the sandbox and cannot import this module, so the rule is
written into the code it generates, from the two snippets below): the answer is the completion's first line,
stripped (:data:`ANSWER_LINE`, the same rule as the seed's ``rewards._answer`` and the evaluator's
``MathDomain.extract_answer``), and it is an integer when, after one optional sign, it is all digits
(:data:`SIGNED_DIGITS`, then ``digits.isdigit()``). ``numeric_answer_match`` rewrites the seed's ``correct``
and calls the seed's ``_answer`` helper, so it applies only to a rewards.py that defines both.

Try it alone (prints each edit's diff against the seed harness)::

    python -m agents.domains.math
"""

from __future__ import annotations

from agents.move_kit import Files, Intervention, disagreeing_component, marker, reads_the_answer, replace_function
from agents.playbook import reward_component
from evotrainer.domains.math import _FINAL as FINAL
from evotrainer.domains.math import _INT as BARE
from evotrainer.harness.knobs import Knobs

# the answer: the first line of the completion, stripped (binds ``text``)
ANSWER_LINE = 'text = sample["completion"].split("\\n", 1)[0].strip()'
# ``text`` without one leading sign (binds ``digits``): ``digits.isdigit()`` then says text is an integer literal
SIGNED_DIGITS = 'digits = text[1:] if text[:1] in "+-" else text'

_CLOSENESS = f'''def closeness(sample: dict) -> float:
    """Graded credit for a near miss: 1 for the exact answer, falling with the distance from it."""
    {marker("partial_credit_reward")}
    {ANSWER_LINE}
    try:
        guess = int(text)
    except ValueError:
        return 0.0
    answer = int(sample["task"]["answer"])
    return max(0.0, 1.0 - abs(guess - answer) / (abs(answer) + 10))
'''

_WELL_FORMED = f'''def well_formed(sample: dict) -> float:
    """1 when the completion ends, and its first line is one integer and nothing else."""
    {marker("format_reward")}
    {ANSWER_LINE}
    {SIGNED_DIGITS}
    return 1.0 if digits.isdigit() and not sample["truncated"] else 0.0
'''


def _verified_answer(func: str) -> str:
    """``func`` rewritten to read the answer as the evaluator does (same name, so its weight and registration stay):
    the evaluator's own patterns, written into the code (harness code cannot import the evaluator)."""
    return f'''def {func}(sample: dict) -> float:
    """1 when the completion gives the task's answer in the evaluator's form, else 0: its first line is an integer,
    or ends in "= <integer>" / "answer is <integer>" (an optional final period), equal to the answer as a number."""
    {marker("verifier_aligned_reward")}
    import re

    {ANSWER_LINE}
    found = re.fullmatch({BARE.pattern!r}, text) or re.search({FINAL.pattern!r}, text, re.IGNORECASE)
    if found is None:
        return 0.0
    return 1.0 if int(found.group(found.lastindex or 0)) == int(sample["task"]["answer"]) else 0.0
'''


def _verifier_aligned(files: Files, knobs: Knobs, ctx: dict) -> Files | None:
    """Rewrite the reward component that disagrees with the verifier to read the answer as the evaluator does, in
    place (its name, weight and registration stay, so the edit is one variable). Two directions, both from the
    diagnosis's per-component evidence: a mostly rewarded-but-wrong disagreement names the component crediting at
    least half of those rollouts (``credits_wrong:<name>``: a lenient parser; the rewrite subtracts its leniency); a
    mostly correct-but-unrewarded one names the component giving at least half of them 0 (``misses_right:<name>``: a
    strict parser), and only one that reads the task's answer is rewritten (a format or length component that
    misses right answers is not a correctness check to repair). Weight above 0; one component per candidate, the one
    the evidence names most strongly: generic in which component disagrees and why."""
    src = files["rewards.py"]
    func = disagreeing_component(src, knobs, ctx, reads_the_answer, "verifier_aligned_reward")
    return None if func is None else {"rewards.py": replace_function(src, func.name, _verified_answer(func.name))}


def _numeric_match(files: Files, knobs: Knobs, ctx: dict) -> Files | None:
    src = files["rewards.py"]
    if marker("numeric_answer_match") in src or "def correct(" not in src or "def _answer(" not in src:
        return None
    new = replace_function(src, "correct", f'''def correct(sample: dict) -> float:
    """1 when the completion's first line is an integer equal to the task's answer, else 0."""
    {marker("numeric_answer_match")}
    text = _answer(sample["completion"]) or ""  # a parser may find no answer (None)
    {SIGNED_DIGITS}
    return 1.0 if digits.isdigit() and int(text) == int(sample["task"]["answer"]) else 0.0
''')
    return {"rewards.py": new}


INTERVENTIONS: list[Intervention] = [
    Intervention(
        "partial_credit_reward", 20, ("dead_groups",), "rewards.closeness", "dead_group_ratio", "down", False,
        "a near-miss answer earns graded credit below a correct one",
        "all-wrong groups then have reward spread, so they carry advantage toward closer answers",
        reward_component("closeness", 0.5, _CLOSENESS, "partial_credit_reward")),
    Intervention(
        "format_reward", 40, ("format_failures",), "rewards.well_formed", "dead_group_ratio", "down", False,
        "a completion that ends with one integer earns a small format reward",
        "groups of wrong answers then separate well-formed from malformed ones",
        reward_component("well_formed", 0.2, _WELL_FORMED, "format_reward")),
    Intervention(
        "verifier_aligned_reward", 45, ("reward_disagreement",), "rewards.*", "reward_verified_auc",
        "up", False, "the reward component that credits wrong answers, or misses right ones, is rewritten to read the "
        "answer as the evaluator does",
        "a reward that credits what the verifier rejects teaches the policy to produce it; one that misses what the "
        "verifier accepts trains the policy away from right answers, or not at all", _verifier_aligned),
    Intervention(
        "numeric_answer_match", 50, ("reward_disagreement",), "rewards.correct", "reward_verified_auc", "up",
        False, "the correctness reward compares the answer as an integer, not as a string",
        "answers such as '+9' or '09' are right but were scored 0", _numeric_match),
]


if __name__ == "__main__":
    import difflib

    from evotrainer.harness.knobs import read_knobs
    from evotrainer.harness.repo import HARNESS_FILES, seed_dir

    seed = seed_dir("math")
    files = {name: (seed / name).read_text() for name in HARNESS_FILES}
    for intervention in INTERVENTIONS:
        for name, text in (intervention.edit(files, read_knobs(seed), {}) or {}).items():
            print("".join(difflib.unified_diff(files[name].splitlines(True), text.splitlines(True),
                                               f"seed/{name}", f"{intervention.name}/{name}")))
