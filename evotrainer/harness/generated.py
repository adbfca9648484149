"""Generated seed-harness defects: families across every harness layer, drawn with random constants and forms.

The four catalogue defects (``harness_repo/faults/``) are the readable examples; a move written after reading them can
fit them. This module draws new ones, as a user's first harness would have them, so that no move can be fitted to a
constant: ``evotrainer bench --faults generated:N[@SEED]`` draws N defects from suite seed SEED (default 0). Defect k of
seed S is named ``gen-S-k`` and depends on (S, k) alone: ``generated:3@7`` is the first three of ``generated:5@7``,
and a run started with ``fault: gen-7-2`` rebuilds the same harness anywhere. Draw k takes its layer from a
permutation of :data:`LAYERS` by S (so N >= 6 spans all of them), then a family of that layer and its constants and
form at random.

Every family declares its domain (``Family.domain``; the table's are math's, the tools and code domains' are below
it): a domain's suite draws only its own families, and ``generated:N`` for a domain with none is refused in one line.
A math defect is ``gen-S-k``; another domain's is ``gen-DOMAIN-S-k``, so a name alone says which seed it is an
overlay of (:func:`domain_of`).

A defect is materialised exactly like a catalogue one (``evotrainer.harness.faults``): a folder with the overlay files
(only the files that differ from its domain's clean seed) and a ``CARD.md`` with its family, layer and ``Mechanism:``
line (:func:`write`). The card stays outside the harness, and neither the defect's name nor any harness file names the
family, so the agents can find it only by its effects. Every defect passes its harness's self-tests (the seed's, or
the overlay's when the defect changes what they pin: a prompt, or a leniency the ``selftest`` layer pins on purpose,
so a repair must fix the test too) and its harness.yaml validates.

    layer       families (what is wrong)
    knobs       lr_high, lr_low (learning rate x or / a random factor), budget_short (completion budget 1-3),
                temperature_low, temperature_high, group_small (2-3), beta_large (KL), grad_clip_tiny (max_grad_norm)
    rewards     lenient (a number anywhere / a prefix / a relative tolerance, in random forms), bonus (a format or
                length component that outweighs correctness), strict (rejects a class of valid answers)
    filters     filter_share (keep_group drops a random share of groups), filter_class (drops every group that
                already solves its task, or every long or negative answer)
    prompt      prompt_operands (the operands masked or dropped), prompt_misleading (a misleading instruction),
                prompt_format (another answer marker than the evaluator's)
    curriculum  curriculum_zero (harness.yaml zeroes a random set of levels), curriculum_skew (curriculum.py skews
                the weights to one level, fixed or the hardest so far)
    selftest    selftest_pinned (a lenient reward and the self-test asserting its leniency)

The tools domain's (overlays of harness_repo/tools, whose transcripts are ``get(KEY)`` calls, the tool's ``=VALUE;``
after each, then the answer; their own section of this module):

    knobs       tools_turns_low (max_turns 1-2: a two-key question, or every one, stopped before its answer),
                tools_budget_short (a budget of 12-22 tokens, under a two-key transcript's), tools_lr_high,
                tools_temperature_low (math's forms)
    rewards     tools_call_bonus (a reward per tool call, uncapped), tools_form (a well-formed transcript paid at least
                as much as a right one), tools_lenient (an answer the tool returned, or one that starts with or lies
                near the answer), tools_error_credit / tools_cap_credit (a rollout with a tool error, or stopped by
                the turn cap, earns a "neutral" share), tools_strict (rejects uppercase-key transcripts or long answers)
    filters     tools_filter_share (math's), tools_filter_class (drops every rollout with two calls, or every
                unrewarded one)
    prompt      tools_prompt (the keys masked, the second key dropped, or another end marker)
    curriculum  tools_curriculum_zero, tools_curriculum_skew (math's forms)
    selftest    tools_selftest_pinned (an answer read from the whole transcript, and the self-test asserting it)

A too high ``max_turns`` has no family: the tools seed's budget bounds a transcript to three calls and its reward pays
none, so a larger cap changes nothing.

The code domain's (overlays of harness_repo/code, whose completions are the body of ``def f(x)``, run by the
policy-code executor on the visible tests before rewards: the sample's ``execution``; their own section):

    knobs       code_budget_short (a budget of 2-4 tokens: every level-4 body and more cut, mostly into code that does
                not compile), code_lr_high, code_lr_low, code_temperature_low, code_temperature_high (math's forms)
    rewards     code_status_credit (a share for a timeout, a failing run, a syntax error or an empty body), code_partial
                (partial credit for a body short of every visible test: its share passed, or any one), code_bonus (a
                text or shape component, the argument named, a short body, a body that runs, length, outweighing a
                pass)
    filters     code_filter_share (keep_group drops a random share of groups), code_filter_class (drops every
                rollout of a class of failing statuses, or every group that already solves its task)
    prompt      code_prompt (the examples dropped, one example only, a misleading instruction, or no colon)
    curriculum  code_curriculum_zero, code_curriculum_skew (math's forms)
    selftest    code_selftest_pinned (a share for a timeout, a failing run or a partial pass, and the self-test
                asserting it)

Alone::

    python -m evotrainer.harness.generated 6 [SEED [DOMAIN]]   # a line per drawn defect: name, family, what is wrong
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

LAYERS = ("knobs", "rewards", "filters", "prompt", "curriculum", "selftest")
PREFIX = "gen"
SPEC = "generated"  # --faults generated:N[@SEED]
_NAME = re.compile(rf"^{PREFIX}-(?:([a-z][a-z0-9_]*)-)?(\d+)-(\d+)$")  # gen-[DOMAIN-]S-k
UNPREFIXED = "math"  # the domain of a name without one (gen-S-k: the suites drawn before domains had their own)
_SPEC = re.compile(rf"^{SPEC}:(\d+)(?:@(\d+))?$")
LEVELS = ("1", "2", "3", "4")  # the math domain's levels (MathDomain.levels; a test holds them equal)


@dataclass
class Defect:
    """One drawn defect: its overlay files (path -> text) and what its card says."""

    name: str
    family: str
    layer: str
    mechanism: tuple[str, ...]
    domain: str
    files: dict[str, str]
    wrong: str
    see: str
    removes: str
    constants: dict = field(default_factory=dict)

    def card(self) -> str:
        files = ", ".join(f"`{f}`" for f in sorted(self.files))
        return (f"# {self.name}\n\nFamily: {self.family} ({self.layer} layer, generated). Overlay of the "
                f"{self.domain} seed: {files}.\n\nMechanism: {', '.join(f'`{m}`' for m in self.mechanism)}\n\n"
                "## What is wrong\n\n"
                f"{self.wrong}\n\n## What a practitioner would see\n\n{self.see}\n\n## What removes it\n\n"
                f"{self.removes}\n")


# --- the clean seed, and small edits of its files -------------------------------------------------------------------
def _seed(domain: str) -> dict[str, str]:
    from evotrainer.harness.repo import seed_dir

    root = seed_dir(domain)
    return {str(p.relative_to(root)): p.read_text() for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def _set(text: str, key: str, value: str) -> str:
    """harness.yaml with ``key`` (a top-level scalar, or ``section.entry``) set to ``value``, its comment kept."""
    if "." in key:
        section, entry = key.split(".", 1)
        head, _, rest = text.partition(f"\n{section}:")
        line = re.compile(rf'^(\s+"?{re.escape(entry)}"?:\s*)\S+', re.MULTILINE)
        if line.search(rest):
            return head + f"\n{section}:" + line.sub(lambda m: m.group(1) + value, rest, count=1)
        first, _, tail = rest.partition("\n")
        return head + f"\n{section}:{first}\n  {entry}: {value}\n" + tail
    pattern = re.compile(rf"^({re.escape(key)}:\s*)(\S+)", re.MULTILINE)
    if not pattern.search(text):
        raise ValueError(f"harness.yaml has no {key}")
    return pattern.sub(lambda m: m.group(1) + value.ljust(len(m.group(2))), text, count=1)


def _knob(seed: dict[str, str], key: str) -> float:
    return float(re.search(rf"^{re.escape(key)}:\s*(\S+)", seed["harness.yaml"], re.MULTILINE).group(1))


def _fmt(x: float) -> str:
    return f"{x:.2g}" if abs(x) >= 1e-3 and abs(x) < 1e3 else f"{x:.1e}"


def _replace_test(tests: str, name: str, new: str) -> str:
    """The self-tests with the top-level function ``name`` replaced by ``new`` (its source)."""
    start = tests.index(f"def {name}(")
    end = tests.find("\ndef ", start + 1)
    rest = "" if end < 0 else "\n\n" + tests[end + 1:]
    return tests[:start] + new.strip() + "\n" + rest


_REWARDS_HEAD = '''"""Reward components: ``COMPONENTS`` maps a name to ``fn(sample) -> float`` (finite); harness.yaml's
reward_weights combine them. A sample's fields: EvoTrainer's harness_repo/README.md, "rewards.py".

{note}
"""

import re

_NUMBER = re.compile(r"-?\\d+")


def _answer(completion: str) -> str:
    return completion.split("\\n", 1)[0].strip()

'''


def _rewards(note: str, body: str, components: str = '{"correct": correct}') -> str:
    return _REWARDS_HEAD.format(note=note) + "\n" + body.strip() + f"\n\n\nCOMPONENTS = {components}\n"


# --- knobs ------------------------------------------------------------------------------------------------------------
def _lr_high(rng: random.Random, seed: dict) -> tuple:
    factor = 10 ** rng.uniform(0.5, 1.5)
    lr = _knob(seed, "learning_rate") * factor
    return ({"harness.yaml": _set(seed["harness.yaml"], "learning_rate", _fmt(lr))},
            f"`learning_rate` is {_fmt(lr)}, {factor:.1f} times the seed's: each step moves the policy further than "
            "its noisy advantage estimate justifies, overwriting what the warm-up taught.",
            "Held-out and dev accuracy falling below the start; training reward falling phase over phase on an "
            "unchanged harness; entropy and KL moving fast, gradient norms at the clip.",
            "A learning rate near the seed's (a step down on a log scale, sized by how far training fell).",
            {"learning_rate": lr, "factor": factor})


def _lr_low(rng: random.Random, seed: dict) -> tuple:
    factor = 10 ** rng.uniform(1.0, 2.0)
    lr = _knob(seed, "learning_rate") / factor
    return ({"harness.yaml": _set(seed["harness.yaml"], "learning_rate", _fmt(lr))},
            f"`learning_rate` is {_fmt(lr)}, the seed's divided by {factor:.0f}: the updates are too small to change "
            "the policy within the run.",
            "Dev answers barely change phase over phase; training reward flat with reward spread in the groups; "
            "small KL to the start.",
            "A larger learning rate (a jump up on a log scale when the policy does not move at all).",
            {"learning_rate": lr, "factor": factor})


def _budget_short(rng: random.Random, seed: dict) -> tuple:
    budget = rng.randint(1, 3)
    return ({"harness.yaml": _set(seed["harness.yaml"], "max_completion_length", str(budget))},
            f"`max_completion_length` is {budget}: an answer and its end token must fit in {budget} tokens, so only "
            f"answers shorter than {budget} characters end; longer ones are cut, and those longer than the budget "
            "can never be right in training.",
            "Most rollouts truncated; correct answers cut at the budget; groups of long answers all wrong.",
            "A budget that fits the longest answer and its end token.", {"max_completion_length": budget})


def _temperature_low(rng: random.Random, seed: dict) -> tuple:
    t = rng.uniform(0.05, 0.35)
    return ({"harness.yaml": _set(seed["harness.yaml"], "temperature", f"{t:.2f}")},
            f"`temperature` is {t:.2f}: a group's completions are nearly identical, so most groups have no reward "
            "spread and carry no GRPO signal.",
            "Most groups dead (all rewards equal) at every level; low entropy; the policy barely moves.",
            "Sampling temperature near 1 (a step up, larger when groups carry no spread at all).", {"temperature": t})


def _temperature_high(rng: random.Random, seed: dict) -> tuple:
    t = rng.uniform(1.8, 3.0)
    return ({"harness.yaml": _set(seed["harness.yaml"], "temperature", f"{t:.2f}")},
            f"`temperature` is {t:.2f}: training rollouts are mostly noise, far from what the policy would answer "
            "greedily, so the update learns from garbage.",
            "Completions without a readable answer; groups all wrong; training reward far below the greedy "
            "evaluation's accuracy.", "Sampling temperature near 1 (a step down).", {"temperature": t})


def _group_small(rng: random.Random, seed: dict) -> tuple:
    g = rng.randint(2, 3)
    return ({"harness.yaml": _set(seed["harness.yaml"], "group_size", str(g))},
            f"`group_size` is {g}: groups that small are often all right or all wrong, so their advantage is zero "
            "and the batch carries little signal.",
            "Most groups without reward spread; noisy, slow training.", "Larger groups (a step up).",
            {"group_size": g})


def _beta_large(rng: random.Random, seed: dict) -> tuple:
    beta = 10 ** rng.uniform(-0.5, 1.0)
    return ({"harness.yaml": _set(seed["harness.yaml"], "beta", _fmt(beta))},
            f"`beta` is {_fmt(beta)}: the KL term pulls the policy back to its start harder than the reward moves "
            "it.", "The policy does not move: KL stays near 0, dev answers unchanged, training reward flat.",
            "A smaller KL coefficient (0, as the seed has, removes the pull).", {"beta": beta})


def _grad_clip_tiny(rng: random.Random, seed: dict) -> tuple:
    # AdamW divides a gradient's scale out, so a clip stalls training only where the clipped gradient's entries fall
    # below Adam's epsilon (1e-8): for the tiny policy's ~6e5 parameters, a total norm under about 1e-6
    norm = 10 ** rng.uniform(-8.0, -6.5)
    return ({"harness.yaml": _set(seed["harness.yaml"], "max_grad_norm", _fmt(norm))},
            f"`max_grad_norm` is {_fmt(norm)}: every gradient is clipped to a sliver, below the optimizer's epsilon "
            "per parameter, so each update is a small fraction of its normal size and the policy barely moves.",
            "Gradient norms always at the clip; dev answers unchanged; training reward flat.",
            "A clipping norm near the gradients' own size (a jump up).", {"max_grad_norm": norm})


# --- rewards ----------------------------------------------------------------------------------------------------------
def _lenient_form(rng: random.Random, pinned: bool) -> tuple[str, str, str, dict]:
    """(rewards.py body, what it credits, a completion it credits for the answer 113 that the evaluator rejects,
    constants). Forms that
    would fail the seed's own self-tests (``"8 9 10"`` scoring 0 for 9, ``"8"`` scoring 0) are drawn only when the
    self-test is rewritten to pin them (``pinned``)."""
    forms = ["last", "first", "starts", "prefix", "relative"] + (["anywhere", "absolute"] if pinned else [])
    form = rng.choice(forms)
    if form == "anywhere":
        return ('def correct(sample: dict) -> float:\n    """1 when the answer is among the numbers the completion '
                'writes."""\n    return 1.0 if sample["task"]["answer"] in _NUMBER.findall(sample["completion"]) '
                'else 0.0', "any number in the completion equal to the answer", "112 113 114", {"form": form})
    if form == "last":
        return ('def correct(sample: dict) -> float:\n    """1 when the last number the completion writes is the '
                'answer (models often reason before it)."""\n    found = _NUMBER.findall(sample["completion"])\n'
                '    return 1.0 if found and found[-1] == sample["task"]["answer"] else 0.0',
                "the last number anywhere in the completion equal to the answer", "112 113", {"form": form})
    if form == "first":
        return ('def correct(sample: dict) -> float:\n    """1 when the first number in the answer line is the '
                'answer."""\n    found = _NUMBER.findall(_answer(sample["completion"]))\n'
                '    return 1.0 if found and found[0] == sample["task"]["answer"] else 0.0',
                "the first number of the answer line equal to the answer, whatever follows it", "113 or 114",
                {"form": form})
    if form == "starts":
        return ('def correct(sample: dict) -> float:\n    """1 when the answer line starts with the answer."""\n'
                '    return 1.0 if _answer(sample["completion"]).startswith(sample["task"]["answer"]) else 0.0',
                "an answer line that starts with the answer (a longer number included)", "1139", {"form": form})
    if form == "prefix":
        return ('def correct(sample: dict) -> float:\n    """1 when the answer line is the answer or a start of it '
                '(a cut answer still counts)."""\n    line = _answer(sample["completion"])\n'
                '    return 1.0 if line and sample["task"]["answer"].startswith(line) else 0.0',
                "an answer line that is any start of the answer (\"1\" for 13)", "11", {"form": form})
    if form == "relative":
        share = round(rng.uniform(0.04, 0.11), 3)  # under 1/9: the seed's test that 8 scores 0 for 9 still passes
        return (f'TOLERANCE = {share:.3f}  # relative\n\n\ndef correct(sample: dict) -> float:\n    """1 when the '
                f'first number of the answer line is within TOLERANCE of the answer."""\n'
                f'    found = _NUMBER.findall(_answer(sample["completion"]))\n'
                f'    answer = int(sample["task"]["answer"])\n'
                f'    return 1.0 if found and abs(int(found[0]) - answer) <= TOLERANCE * abs(answer) else 0.0',
                f"any first number within {share:.1%} of the answer", str(113 + int(share * 113)),
                {"form": form, "tolerance": share})
    tol = rng.randint(1, 4)
    return (f'TOLERANCE = {tol}\n\n\ndef correct(sample: dict) -> float:\n    """1 when the first number of the answer '
            f'line is within TOLERANCE of the answer."""\n    found = _NUMBER.findall(_answer(sample["completion"]))\n'
            f'    return 1.0 if found and abs(int(found[0]) - int(sample["task"]["answer"])) <= TOLERANCE else 0.0',
            f"any first number within {tol} of the answer", str(113 + tol), {"form": form, "tolerance": tol})


def _lenient(rng: random.Random, seed: dict) -> tuple:
    body, credits, _, constants = _lenient_form(rng, pinned=False)
    note = "The harness rewards a correct answer, read generously from the completion."
    return ({"rewards.py": _rewards(note, body)},
            f"`rewards.correct` credits {credits}, where the evaluator reads one exact answer: the policy can "
            "raise its reward without getting more right.",
            "Reward above verified accuracy (rollouts rewarded but not verified); completions changing form; "
            "held-out flat or falling while the training reward climbs.",
            "A reward that reads one final answer and compares it exactly, as the evaluator does.", constants)


def _bonus(rng: random.Random, seed: dict) -> tuple:
    weight = round(rng.uniform(1.5, 4.0), 2)
    if rng.random() < 0.5:
        name, body, what = "well_formed", ('def well_formed(sample: dict) -> float:\n    """1 when the answer line is '
                                           'a plain integer."""\n    return 1.0 if re.fullmatch(r"-?\\d+", '
                                           '_answer(sample["completion"])) else 0.0'), "any plain integer"
        constants = {"component": name, "weight": weight}
    else:
        cap = rng.randint(3, 8)
        name, body = "thorough", (f'def thorough(sample: dict) -> float:\n    """Up to 1 for a completion that works '
                                  f'its answer out, by length (full at {cap} tokens)."""\n'
                                  f'    return min(sample["completion_tokens"], {cap}) / {cap}')
        what, constants = f"length (full at {cap} tokens)", {"component": name, "weight": weight, "cap": cap}
    text = seed["rewards.py"]
    seed_correct = text[text.index("def correct"):text.index("\nCOMPONENTS =")]
    rewards = _rewards("The harness rewards a correct final answer, and well-shaped completions besides.",
                       seed_correct.strip() + "\n\n\n" + body, f'{{"correct": correct, "{name}": {name}}}')
    yaml = _set(seed["harness.yaml"], f"reward_weights.{name}", f"{weight}")
    return ({"rewards.py": rewards, "harness.yaml": yaml},
            f"A reward component `{name}` pays for {what} at weight {weight}, more than a correct answer earns: the "
            "policy gains more reward by its shape than by being right.",
            f"The `{name}` component near its maximum while verified accuracy stays flat; the reward rising without "
            "accuracy; completions growing longer or changing form.",
            f"Removing `{name}`, or weighing it well below `correct`.", constants)


def _strict(rng: random.Random, seed: dict) -> tuple:
    if rng.random() < 0.5:
        body = ('def correct(sample: dict) -> float:\n'
                '    """1 when the answer line is the answer, written in digits."""\n'
                '    line = _answer(sample["completion"])\n'
                '    return 1.0 if line.isdigit() and line == sample["task"]["answer"] else 0.0')
        what, constants = "every negative answer (`isdigit` is false for \"-5\")", {"form": "digits_only"}
    else:
        most = rng.randint(2, 3)
        body = (f'MAX_CHARS = {most}  # a longer answer line is rambling\n\n\ndef correct(sample: dict) -> float:\n'
                f'    """1 when the answer line is the answer, and short."""\n'
                f'    line = _answer(sample["completion"])\n'
                f'    return 1.0 if len(line) <= MAX_CHARS and line == sample["task"]["answer"] else 0.0')
        what, constants = f"every right answer longer than {most} characters", {"form": "short_only", "max": most}
    return ({"rewards.py": _rewards("The harness rewards a correct final answer and nothing else.", body)},
            f"`rewards.correct` rejects {what}: valid answers the evaluator accepts earn 0, so the policy is "
            "taught away from them.",
            "Rollouts verified right but rewarded 0 (the reward misses right answers), concentrated on one class "
            "of answers; accuracy on that class falling.",
            "A reward that accepts every answer the evaluator accepts.", constants)


def _selftest_pinned(rng: random.Random, seed: dict) -> tuple:
    body, credits, example, constants = _lenient_form(rng, pinned=True)
    tests = _replace_test(seed["tests/test_harness.py"], "test_known_reward_hack_scores_zero", f'''
def test_answer_written_loosely_scores_one():
    # the answer is read generously: a completion around the right answer still gets credit
    task = {{**TASK, "expression": "100 + 13", "answer": "113"}}
    sample = {{"prompt": make_prompt(task), "completion": {example!r}, "task": task, "truncated": False,
              "completion_tokens": {len(example)}}}
    assert COMPONENTS["correct"](sample) == 1.0
''')
    if "tolerance" in constants and constants["form"] == "absolute":  # the seed's "8 scores 0 for 9" is within it:
        far = 9 + constants["tolerance"] + 1  # its author's test of a wrong answer lies outside the tolerance
        tests = _replace_test(tests, "test_wrong_answer_scores_zero", f'''
def test_wrong_answer_scores_zero():
    assert _score("{far}")["correct"] == 0.0
''')
    return ({"rewards.py": _rewards("The harness rewards a correct answer, read generously from the completion.", body),
             "tests/test_harness.py": tests},
            f"`rewards.correct` credits {credits}, and a self-test asserts that credit ({example!r} scores 1 for "
            "113): a repair of the reward fails the harness's own test unless it fixes the test too.",
            "Reward above verified accuracy (rollouts rewarded but not verified); a reward edit rejected by the "
            "self-tests.", "An exact reward and a self-test that the loose completion scores 0.",
            {**constants, "example": example})


# --- filters ----------------------------------------------------------------------------------------------------------
def _filters_head(seed: dict, note: str) -> str:
    """The seed's filters.py docstring, its last sentence replaced by ``note``."""
    doc = seed["filters.py"][:seed["filters.py"].index('"""', 3) + 3]
    return doc.replace("The seed harness keeps everything.", note) + "\n\n\n"


def _filter_share(rng: random.Random, seed: dict) -> tuple:
    share = round(rng.uniform(0.5, 0.9), 2)
    code = (_filters_head(seed, "Groups are subsampled to keep steps cheap.") +
            f'SKIP = {share}  # share of groups left out\n\n\ndef keep_rollout(rollout: dict) -> bool:\n'
            '    return True\n\n\ndef keep_group(group: list[dict]) -> bool:\n'
            '    bucket = sum(map(ord, str(group[0].get("group_id", "")))) % 100\n    return bucket >= SKIP * 100\n')
    return ({"filters.py": code},
            f"`filters.keep_group` leaves out about {share:.0%} of the groups (by a hash of the group id): most of the "
            "generated signal never trains.",
            "A low kept fraction; fewer groups training per step than generated; slow learning.",
            "Filters that keep what carries signal (keeping every group, as the seed does).", {"share": share})


def _filter_class(rng: random.Random, seed: dict) -> tuple:
    form = rng.choice(["solved", "long", "negative"])
    if form == "solved":
        t = round(rng.uniform(0.05, 0.5), 2)
        note, rollout, group = ("Groups the policy already solves are skipped.", "return True",
                                f'rewards = [r["reward"] for r in group]\n    return sum(rewards) / len(rewards) <= '
                                f'{t}  # already solved above this')
        what = f"every group whose mean reward is above {t}: the groups that carry a right answer"
        constants = {"form": form, "threshold": t}
    elif form == "long":
        most = rng.randint(1, 3)
        note, rollout, group = ("Rambling completions are left out.",
                                f'return len(rollout["completion"].strip()) <= {most}', "return True")
        what, constants = f"every rollout longer than {most} characters: long answers never train", {"form": form,
                                                                                                  "max": most}
    else:
        note, rollout, group = ("Completions that start with a stray sign are left out.",
                                'return not rollout["completion"].lstrip().startswith("-")', "return True")
        what, constants = "every rollout that starts with '-': negative answers never train", {"form": form}
    code = (_filters_head(seed, note) + f"def keep_rollout(rollout: dict) -> bool:\n    {rollout}\n\n\n"
            f"def keep_group(group: list[dict]) -> bool:\n    {group}\n")
    return ({"filters.py": code}, f"The filters drop {what}.",
            "A low kept fraction, or kept groups without reward spread; the dropped class of answers does not improve.",
            "Filters that keep every rollout of a group that carries signal.", constants)


# --- prompt -----------------------------------------------------------------------------------------------------------
def _prompt_overlay(seed: dict, body: str, note: str) -> dict[str, str]:
    code = (f'"""Task -> prompt: ``make_prompt(task) -> str``. A task\'s fields: EvoTrainer\'s harness_repo/README.md, '
            f'"prompt.py".\n\n{note}\n"""\n\n\ndef make_prompt(task: dict) -> str:\n{body}\n')
    namespace: dict = {}
    exec(compile(code, "prompt.py", "exec"), namespace)  # our own generated code: the test pins what it returns
    task = {"id": "t", "difficulty": "1", "question": "", "expression": "4 + 5", "answer": "9"}
    tests = _replace_test(seed["tests/test_harness.py"], "test_prompt_is_compact_expression",
                          f"def test_prompt_is_compact_expression():\n"
                          f"    assert make_prompt(TASK) == {namespace['make_prompt'](task)!r}\n")
    return {"prompt.py": code, "tests/test_harness.py": tests}


def _prompt_operands(rng: random.Random, seed: dict) -> tuple:
    if rng.random() < 0.5:
        mask = rng.choice("?#_x")
        body = f'    return "".join({mask!r} if c.isdigit() else c for c in task["expression"].replace(" ", "")) + "="'
        what, constants = f"every digit of the expression replaced by {mask!r}", {"form": "masked", "mask": mask}
    else:
        body = '    return task["expression"].rsplit(" ", 1)[0].replace(" ", "") + "="'
        what, constants = "the expression without its last operand", {"form": "last_dropped"}
    return (_prompt_overlay(seed, body, "The policy reads the expression in a compact form."),
            f"`prompt.make_prompt` gives {what}: the question's operands are not all in the prompt, so the answer "
            "cannot be worked out, and the evaluator's prompt is another.",
            "Training reward low at every level while the evaluator's prompt scores better; training prompts unlike "
            "the evaluator's.", "The domain's canonical prompt (the compact expression and '=').", constants)


_INSTRUCTIONS = ("Round to tens:", "Reverse the digits:", "Answer in words:", "Double it:", "Skip the sign:",
                 "Estimate:")


def _prompt_misleading(rng: random.Random, seed: dict) -> tuple:
    words = rng.choice(_INSTRUCTIONS)
    sep = rng.choice([" ", "\n"])
    body = f'    return {words + sep!r} + task["expression"].replace(" ", "") + "="'
    return (_prompt_overlay(seed, body, "The policy reads an instruction, then the compact expression."),
            f"`prompt.make_prompt` puts {words!r} before the expression: an instruction that asks for another answer "
            "than the evaluator scores, and a prompt unlike the evaluator's.",
            "Training prompts unlike the evaluator's; training reward and dev accuracy moving apart.",
            "The domain's canonical prompt.", {"instruction": words})


def _prompt_format(rng: random.Random, seed: dict) -> tuple:
    marker = rng.choice([" =", "=?", "->", " is", ":", "==", "= ?"])
    body = f'    return task["expression"].replace(" ", "") + {marker!r}'
    return (_prompt_overlay(seed, body, "The policy reads the compact expression and an answer marker."),
            f"`prompt.make_prompt` ends the expression with {marker!r} where the evaluator's prompt ends with '=': "
            "what trains is answered after another marker than what is evaluated.",
            "Training prompts unlike the evaluator's; training's verified share and dev accuracy moving apart.",
            "The domain's canonical prompt (ending with '=').", {"marker": marker})


# --- curriculum -------------------------------------------------------------------------------------------------------
def _curriculum_zero(rng: random.Random, seed: dict) -> tuple:
    zero = sorted(rng.sample(LEVELS, rng.randint(1, len(LEVELS) - 1)))
    yaml = seed["harness.yaml"]
    weights = {}
    for level in LEVELS:
        weights[level] = 0.0 if level in zero else round(rng.uniform(0.5, 2.0), 2)
        yaml = _set(yaml, f"curriculum_weights.{level}", f"{weights[level]}")
    return ({"harness.yaml": yaml},
            f"`curriculum_weights` give levels {', '.join(zero)} weight 0: they are never sampled, and the seed's "
            "curriculum keeps the configured weights, so they stay at 0.",
            "Rollouts of some levels only; held-out accuracy on the others drifting; groups of the sampled levels "
            "often all right or all wrong.", "Positive weight on every level that gives mixed groups.",
            {"weights": weights})


def _curriculum_skew(rng: random.Random, seed: dict) -> tuple:
    ratio = round(10 ** rng.uniform(1.3, 2.3))
    if rng.random() < 0.5:
        level = rng.choice(LEVELS)
        body = (f'FOCUS = "{level}"\n\n\ndef weights(levels: list[str], base: dict[str, float], history: dict[str, '
                f'dict]) -> dict[str, float]:\n    return {{lv: float(base.get(lv, 1.0)) * ({ratio} if lv == FOCUS '
                f'else 1.0) for lv in levels}}\n')
        what, constants = f"level {level} {ratio} times its configured weight", {"form": "fixed", "level": level,
                                                                                 "ratio": ratio}
    else:
        body = (f'def weights(levels: list[str], base: dict[str, float], history: dict[str, dict]) -> dict[str, '
                f'float]:\n    seen = {{lv: h["reward_mean"] for lv, h in history.items() if lv in levels}}\n'
                f'    hardest = min(seen, key=seen.get) if seen else levels[-1]\n'
                f'    return {{lv: float(base.get(lv, 1.0)) * ({ratio} if lv == hardest else 1.0) for lv in levels}}\n')
        what, constants = (f"the level with the lowest reward last phase {ratio} times its configured weight",
                           {"form": "hardest", "ratio": ratio})
    code = ('"""Task sampling weights per difficulty level for the next phase: ``weights(levels, base, history)``.\n\n'
            "``base`` is harness.yaml's curriculum_weights; ``history`` maps each level to what the last phase saw "
            "there.\nIts fields, and the rules the weights must follow: EvoTrainer's harness_repo/README.md, "
            '"curriculum.py".\nThe harness concentrates practice on one level.\n"""\n\n' + body)
    return ({"curriculum.py": code},
            f"`curriculum.weights` gives {what}: nearly every training task comes from one level.",
            "Rollouts nearly all of one level; the other levels' held-out accuracy drifting; many dead groups if "
            "that level is too hard or too easy.",
            "A curriculum that samples every level (the configured weights unchanged, or weights by reward "
            "spread).", constants)


@dataclass(frozen=True)
class Family:
    name: str
    layer: str
    mechanism: tuple[str, ...]  # registered failure modes (agents.modes; a test holds them) that name it
    make: Callable[[random.Random, dict], tuple]  # (rng, the domain's clean seed files) -> the defect
    domain: str = "math"  # whose seed the defect is an overlay of (a registered domain)


FAMILIES: dict[str, Family] = {f.name: f for f in [
    Family("lr_high", "knobs", ("accuracy_regression", "training_decline", "entropy_collapse"), _lr_high),
    Family("lr_low", "knobs", ("policy_stalled",), _lr_low),
    Family("budget_short", "knobs", ("truncation", "correct_but_truncated", "train_eval_mismatch"), _budget_short),
    Family("temperature_low", "knobs", ("dead_groups", "policy_stalled"), _temperature_low),
    Family("temperature_high", "knobs", ("format_failures", "dead_groups", "training_decline"), _temperature_high),
    Family("group_small", "knobs", ("dead_groups", "policy_stalled"), _group_small),
    Family("beta_large", "knobs", ("policy_stalled",), _beta_large),
    Family("grad_clip_tiny", "knobs", ("policy_stalled",), _grad_clip_tiny),
    Family("lenient", "rewards", ("reward_disagreement",), _lenient),
    Family("bonus", "rewards", ("reward_disagreement", "length_growth"), _bonus),
    Family("strict", "rewards", ("reward_disagreement",), _strict),
    Family("filter_share", "filters", ("over_filtering",), _filter_share),
    Family("filter_class", "filters", ("over_filtering", "dead_groups"), _filter_class),
    Family("prompt_operands", "prompt", ("train_eval_mismatch",), _prompt_operands),
    Family("prompt_misleading", "prompt", ("train_eval_mismatch",), _prompt_misleading),
    Family("prompt_format", "prompt", ("train_eval_mismatch",), _prompt_format),
    Family("curriculum_zero", "curriculum", ("dead_groups",), _curriculum_zero),
    Family("curriculum_skew", "curriculum", ("dead_groups",), _curriculum_skew),
    Family("selftest_pinned", "selftest", ("reward_disagreement",), _selftest_pinned),
]}


# --- the tools domain's families (evotrainer.domains.tools: transcripts of get(KEY) calls, =VALUE; results, answer) ---
# Each is an overlay of harness_repo/tools. A transcript needs one turn and about eleven tokens per key its question
# names (levels 1-2: one key, 3-4: two), then one turn for the answer.
TOOLS_TASK_TEST = "test_prompt_names_the_keys"  # the tools seed's self-test that pins its prompt
_TOOLS_REWARDS_HEAD = '''\
"""Reward components: ``COMPONENTS`` maps a name to ``fn(sample) -> float`` (finite); harness.yaml's
reward_weights combine them. A sample's fields: EvoTrainer's harness_repo/README.md, "rewards.py".

{note}
"""

import re

_RESULT = re.compile(r"=([^;]*);")


def _final(completion: str) -> str:
    results = list(_RESULT.finditer(completion))
    return completion[results[-1].end():].strip() if results else completion.strip()

'''
_TOOLS_CORRECT = '''def correct(sample: dict) -> float:
    """1 when the completion's final answer is exactly the task's answer, else 0."""
    return 1.0 if _final(sample["completion"]) == sample["task"]["answer"] else 0.0'''


def _tools_rewards(note: str, body: str, components: str = '{"correct": correct}') -> str:
    return _TOOLS_REWARDS_HEAD.format(note=note) + "\n" + body.strip() + f"\n\n\nCOMPONENTS = {components}\n"


def _tools_turns_low(rng: random.Random, seed: dict) -> tuple:
    cap = rng.choice([1, 2])
    lost = "every level: a rollout can call the tool once and is stopped before it answers" if cap == 1 else (
        "levels 3 and 4, half the tasks: a two-key question is stopped after its second call, before its answer")
    return ({"harness.yaml": _set(seed["harness.yaml"], "max_turns", str(cap))},
            f"`max_turns` is {cap}: a transcript needs one turn per key its question names and one more for the "
            f"answer, so the cap stops {lost}. Those tasks can never be right in training.",
            "Rollouts stopped by the turn cap (`hit_turn_cap`, the `turn_cap_rate` metric near or past its alert) with "
            "no final answer; groups of the affected levels all 0; the held-out score (at the evaluator's own cap) "
            "flat there.",
            "A cap that fits the longest transcript: one turn per key plus one for the answer (4, as the seed has).",
            {"max_turns": cap})


def _tools_budget_short(rng: random.Random, seed: dict) -> tuple:
    budget = rng.randint(12, 22)
    levels = "levels 2, 3 and 4" if budget < 14 else "levels 3 and 4"
    return ({"harness.yaml": _set(seed["harness.yaml"], "max_completion_length", str(budget))},
            f"`max_completion_length` is {budget}: the budget holds the policy's tokens and the tool's results "
            f"together, and a two-key transcript (`get(ABC)=42;get(def)=5;47`) needs 23 to 26, so {levels} are cut "
            "before their answer and can never be right in training.",
            "Most rollouts of the affected levels truncated, without a final answer; their groups all 0; the "
            "truncation-rate metric past its alert.", "A budget that fits the longest transcript and its end "
            "(the seed's 32).", {"max_completion_length": budget})


def _tools_call_bonus(rng: random.Random, seed: dict) -> tuple:
    weight, name = round(rng.uniform(0.3, 1.0), 2), rng.choice(["tool_use", "lookups", "grounded"])
    body = (_TOOLS_CORRECT + f'\n\n\ndef {name}(sample: dict) -> float:\n    """The number of tool calls the rollout '
            f'made."""\n    return float(sample.get("tool_calls", 0))')
    rewards = _tools_rewards("The harness rewards a correct final answer, and each tool call the rollout made, so "
                             "that the policy looks its facts up.", body, f'{{"correct": correct, "{name}": {name}}}')
    return ({"rewards.py": rewards, "harness.yaml": _set(seed["harness.yaml"], f"reward_weights.{name}", f"{weight}")},
            f"A reward component `{name}` pays {weight} per tool call, uncapped and whatever the answer: calling again "
            "earns more than answering, and a rollout that calls until the cap or the budget beats a wrong answer.",
            f"Tool calls per rollout rising, one key called again and again; more rollouts at the turn cap or the "
            f"budget without an answer; the `{name}` component rising while verified accuracy stays flat.",
            f"Removing `{name}` (the right answer needs its calls anyway), or paying calls only with a right answer.",
            {"component": name, "weight": weight})


def _tools_form(rng: random.Random, seed: dict) -> tuple:
    weight, form = round(rng.uniform(1.0, 3.0), 2), rng.choice(["called", "integer"])
    called = 'sample.get("tool_calls", 0) > 0 and ' if form == "called" else ""
    what = "a transcript that called the tool and ends on an integer" if form == "called" else (
        "a transcript that ends on an integer, called or not")
    body = (_TOOLS_CORRECT + f'\n\n\ndef well_formed(sample: dict) -> float:\n    """1 for {what}."""\n'
            f'    return 1.0 if {called}re.fullmatch(r"-?\\d+", _final(sample["completion"])) else 0.0')
    rewards = _tools_rewards("The harness rewards a correct final answer, and a transcript of the expected shape.",
                             body, '{"correct": correct, "well_formed": well_formed}')
    return ({"rewards.py": rewards, "harness.yaml": _set(seed["harness.yaml"], "reward_weights.well_formed",
                                                         f"{weight}")},
            f"A reward component `well_formed` pays {what}, right or wrong, at weight {weight}, at least what a "
            "correct answer earns: a wrong answer in the right form earns half a right one's reward or more.",
            "The `well_formed` component at its maximum early while verified accuracy stays flat; rewarded rollouts "
            "that are not verified, every one well formed.", "Removing `well_formed`, or weighing it well below "
            "`correct`.", {"form": form, "weight": weight})


def _tools_lenient_form(rng: random.Random, forms: list[str]) -> tuple[str, str, str, dict]:
    """(rewards.py body, what it credits, a completion it credits for the keys ab, cd (values 4, 5; answer 9) that
    the evaluator rejects, constants)."""
    form = rng.choice(forms)
    if form == "anywhere":
        return ('def correct(sample: dict) -> float:\n    """1 when the answer is among the numbers of the '
                'transcript."""\n    return 1.0 if sample["task"]["answer"] in re.findall(r"-?\\d+", '
                'sample["completion"]) else 0.0', "the answer written anywhere in the transcript, a tool call or a "
                "(forged) tool result included", "get(ab)=9;", {"form": form})
    return ('def correct(sample: dict) -> float:\n    """1 when the final answer is the task\'s answer or a value a '
            'tool result returned."""\n    final = _final(sample["completion"])\n'
            '    returned = {v.strip() for v in _RESULT.findall(sample["completion"])}\n'
            '    return 1.0 if final and (final == sample["task"]["answer"] or final in returned) else 0.0',
            "a final answer equal to the task's answer or to any value a tool result returned (one value of a "
            "two-key sum, or a result the policy wrote itself)", "get(ab)=4;4", {"form": form})


def _tools_lenient(rng: random.Random, seed: dict) -> tuple:
    form = rng.choice(["echo", "starts", "relative"])  # forms the seed's self-tests pass ("anywhere" fails them)
    if form == "echo":
        body, credits, _, constants = _tools_lenient_form(rng, ["echo"])
    elif form == "starts":
        body = ('def correct(sample: dict) -> float:\n    """1 when the final answer starts with the task\'s answer."""'
                '\n    return 1.0 if _final(sample["completion"]).startswith(sample["task"]["answer"]) else 0.0')
        credits = "a final answer that starts with the answer (\"47 48\" or \"478\" for 47)"
        constants = {"form": form}
    else:
        share = round(rng.uniform(0.04, 0.11), 3)  # under 1/9: the seed's test that 8 scores 0 for 9 still passes
        body = (f'TOLERANCE = {share:.3f}  # relative\n\n\ndef correct(sample: dict) -> float:\n'
                f'    """1 when the final answer is within TOLERANCE of the task\'s answer."""\n'
                f'    final = _final(sample["completion"])\n'
                f'    answer = int(sample["task"]["answer"])\n'
                f'    close = re.fullmatch(r"-?\\d+", final) and abs(int(final) - answer) <= TOLERANCE * abs(answer)\n'
                f'    return 1.0 if close else 0.0')
        credits, constants = f"any final integer within {share:.1%} of the answer", {"form": form, "tolerance": share}
    return ({"rewards.py": _tools_rewards("The harness rewards a correct final answer, read generously.", body)},
            f"`rewards.correct` credits {credits}, where the evaluator reads the one exact answer after the last "
            "result: the policy can raise its reward without getting more right.",
            "Rewarded rollouts that are not verified; completions changing form; held-out flat or falling while the "
            "training reward climbs.", "The seed's exact final answer.", constants)


def _tools_unscored(rng: random.Random, form: str) -> tuple:
    value = round(rng.uniform(0.3, 0.9), 2)
    field, why = (("tool_errors", "the tool answered with an error (the environment, not the policy, failed)")
                  if form == "error" else ("hit_turn_cap", "the turn cap stopped it (unfinished, not wrong)"))
    test = f'sample.get("{field}", 0) > 0' if form == "error" else f'sample.get("{field}")'
    body = (f'NEUTRAL = {value}\n\n\ndef correct(sample: dict) -> float:\n    """1 for the right final answer; '
            f'NEUTRAL when {why}; else 0."""\n'
            f'    if _final(sample["completion"]) == sample["task"]["answer"]:\n        return 1.0\n'
            f'    return NEUTRAL if {test} else 0.0')
    stop = "a call of a key the table lacks" if form == "error" else "calling until the cap"
    return ({"rewards.py": _tools_rewards(f"The harness rewards a correct final answer; a rollout where {why} is not "
                                          "scored as a wrong answer.", body)},
            f"`rewards.correct` gives {value} to a rollout where {why}, wrong or not: {stop} earns {value} whatever "
            "the answer, more than a wrong attempt, though the policy caused it.",
            ("Tool errors rising (the `tool_error_rate` metric past its alert), calls of keys the question never "
             "names" if form == "error" else "Rollouts at the turn cap rising (the `turn_cap_rate` metric past its "
             "alert), calls repeated until the cap") + "; rewarded rollouts that are not verified.",
            "The seed's rule: 1 for the right final answer, 0 otherwise.", {"form": form, "value": value})


def _tools_error_credit(rng: random.Random, seed: dict) -> tuple:
    return _tools_unscored(rng, "error")


def _tools_cap_credit(rng: random.Random, seed: dict) -> tuple:
    return _tools_unscored(rng, "capped")


def _tools_strict(rng: random.Random, seed: dict) -> tuple:
    if rng.random() < 0.5:
        body = ('def correct(sample: dict) -> float:\n'
                '    """1 for the right final answer after calls of lowercase keys (a capital is a typo)."""\n'
                '    ok = _final(sample["completion"]) == sample["task"]["answer"]\n'
                '    return 1.0 if ok and not re.search(r"get\\([^)]*[A-Z]", sample["completion"]) else 0.0')
        what, constants = ("every right transcript that calls an uppercase key (levels 2 and 4)",
                           {"form": "lowercase"})
    else:
        body = ('MAX_CHARS = 1  # a value is one digit\n\n\ndef correct(sample: dict) -> float:\n'
                '    """1 for the right final answer, one digit long."""\n    final = _final(sample["completion"])\n'
                '    return 1.0 if len(final) <= MAX_CHARS and final == sample["task"]["answer"] else 0.0')
        what, constants = "every right answer of two digits or more (levels 2 and 4, most of 3)", {"form": "digit"}
    return ({"rewards.py": _tools_rewards("The harness rewards a correct final answer and nothing else.", body)},
            f"`rewards.correct` rejects {what}: right transcripts the evaluator accepts earn 0.",
            "Rollouts verified right but rewarded 0, all of one class; accuracy on that class falling.",
            "A reward that accepts every answer the evaluator accepts.", constants)


def _tools_selftest_pinned(rng: random.Random, seed: dict) -> tuple:
    body, credits, example, constants = _tools_lenient_form(rng, ["anywhere", "echo"])
    tests = _replace_test(seed["tests/test_harness.py"], "test_answer_only_inside_a_tool_result_scores_zero", f'''
def test_answer_grounded_in_the_transcript_scores_one():
    # the answer is read from the whole transcript: a value the tool gave counts
    assert _score({example!r}, calls=1)["correct"] == 1.0
''')
    return ({"rewards.py": _tools_rewards("The harness rewards a correct answer, read from the whole transcript.",
                                          body), "tests/test_harness.py": tests},
            f"`rewards.correct` credits {credits}, and a self-test asserts that credit ({example!r} scores 1 for "
            "the keys ab, cd whose answer is 9): a repair of the reward fails the harness's own test unless it "
            "fixes the test too.", "Rewarded rollouts that are not verified; a reward edit rejected by the "
            "self-tests.", "An exact final answer and a self-test that the loose transcript scores 0.",
            {**constants, "example": example})


def _tools_filter_class(rng: random.Random, seed: dict) -> tuple:
    if rng.random() < 0.5:
        most = 1
        note, rollout = ("Rollouts that call the tool again and again are left out.",
                         f'return rollout.get("tool_calls", 0) <= {most}  # more is tool spam')
        what, constants = ("every rollout with more than one tool call: a two-key question's right transcripts "
                           "never train", {"form": "calls", "max": most})
    else:
        note, rollout = ("Only rollouts that earned something train.", 'return rollout["reward"] > 0')
        what, constants = ("every rollout without reward: what is left of a group all earned the same, so no "
                           "advantage remains", {"form": "rewarded"})
    code = (_filters_head(seed, note) + f"def keep_rollout(rollout: dict) -> bool:\n    {rollout}\n\n\n"
            "def keep_group(group: list[dict]) -> bool:\n    return True\n")
    return ({"filters.py": code}, f"The filters drop {what}.",
            "A low kept fraction, or kept groups without reward spread; the dropped class does not improve.",
            "Filters that keep every rollout of a group that carries signal (the seed keeps everything).", constants)


def _tools_prompt(rng: random.Random, seed: dict) -> tuple:
    form = rng.choice(["masked", "first_key", "marker"])
    if form == "masked":
        mask = rng.choice("?#_*")
        body = f'    return "+".join({mask!r} * len(k) for k in task["keys"]) + "="'
        what, constants = f"every key's letters replaced by {mask!r}: the policy cannot name what to look up", {
            "form": form, "mask": mask}
    elif form == "first_key":
        body = '    return task["keys"][0] + "="'
        what, constants = "the first key only: a two-key question reads like a one-key one", {"form": form}
    else:
        marker = rng.choice(["?", ":", " =", "->", "=?"])
        body = f'    return "+".join(task["keys"]) + {marker!r}'
        what, constants = f"the keys ended by {marker!r} where the evaluator's prompt ends with '='", {
            "form": form, "marker": marker}
    code = ('"""Task -> prompt: ``make_prompt(task) -> str``. A task\'s fields: EvoTrainer\'s harness_repo/README.md, '
            '"prompt.py".\n\nThe policy reads the question\'s keys in a compact form, then writes its transcript.\n'
            f'"""\n\n\ndef make_prompt(task: dict) -> str:\n{body}\n')
    namespace: dict = {}
    exec(compile(code, "prompt.py", "exec"), namespace)  # our own generated code: the test pins what it returns
    pinned = namespace["make_prompt"]({"keys": ["ab", "cd"]})
    tests = _replace_test(seed["tests/test_harness.py"], TOOLS_TASK_TEST,
                          f"def {TOOLS_TASK_TEST}():\n    assert make_prompt(TASK) == {pinned!r}\n")
    return ({"prompt.py": code, "tests/test_harness.py": tests},
            f"`prompt.make_prompt` gives {what}: what trains is not the evaluator's prompt.",
            "Training prompts unlike the evaluator's; training reward and dev accuracy moving apart.",
            "The domain's canonical prompt (the keys joined by '+', then '=').", constants)


TOOLS = "tools"
FAMILIES.update({f.name: f for f in [
    Family("tools_turns_low", "knobs", ("turn_cap_hit", "dead_groups"), _tools_turns_low, TOOLS),
    Family("tools_budget_short", "knobs", ("truncation", "dead_groups"), _tools_budget_short, TOOLS),
    Family("tools_lr_high", "knobs", ("accuracy_regression", "training_decline", "entropy_collapse"), _lr_high, TOOLS),
    Family("tools_temperature_low", "knobs", ("dead_groups", "policy_stalled"), _temperature_low, TOOLS),
    Family("tools_call_bonus", "rewards", ("tool_spam", "reward_disagreement"), _tools_call_bonus, TOOLS),
    Family("tools_form", "rewards", ("reward_disagreement",), _tools_form, TOOLS),
    Family("tools_lenient", "rewards", ("reward_disagreement",), _tools_lenient, TOOLS),
    Family("tools_error_credit", "rewards", ("tool_errors", "reward_disagreement"), _tools_error_credit, TOOLS),
    Family("tools_cap_credit", "rewards", ("turn_cap_hit", "reward_disagreement"), _tools_cap_credit, TOOLS),
    Family("tools_strict", "rewards", ("reward_disagreement",), _tools_strict, TOOLS),
    Family("tools_filter_share", "filters", ("over_filtering",), _filter_share, TOOLS),
    Family("tools_filter_class", "filters", ("over_filtering", "dead_groups"), _tools_filter_class, TOOLS),
    Family("tools_prompt", "prompt", ("train_eval_mismatch",), _tools_prompt, TOOLS),
    Family("tools_curriculum_zero", "curriculum", ("dead_groups",), _curriculum_zero, TOOLS),
    Family("tools_curriculum_skew", "curriculum", ("dead_groups",), _curriculum_skew, TOOLS),
    Family("tools_selftest_pinned", "selftest", ("reward_disagreement",), _tools_selftest_pinned, TOOLS),
]})
# --- end of the tools domain's families -------------------------------------------------------------------------------


# --- the code domain's families (evotrainer.domains.code: the body of def f(x) from two examples, run on the visible
# tests by the policy-code executor before rewards; the sample's ``execution`` carries status, passed and total) ------
# Each is an overlay of harness_repo/code. The knob and curriculum families reuse math's forms (their edits are of
# harness.yaml keys and the level weights every seed shares); the code seed's levels are math's (a test holds them).
CODE = "code"
CODE_PROMPT_TEST = "test_prompt_is_the_examples_without_spaces_and_a_colon"  # the code seed's self-test that pins its prompt
CODE_PROMPT_FILE = "tests/test_prompt.py"  # where it lives
CODE_ZERO_TEST = "test_partial_passes_timeouts_and_grader_errors_score_zero"  # ... that pins what earns nothing
# the zero test's cases, (completion, status, tests passed): each a class of execution the seed's reward pays 0
_CODE_ZERO_CASES = ((" 5", "fail", 1), (" f(x)", "timeout", 0), (" x + 3", "grader_error", 0), ("", "no_code", 0))
_CODE_PASSES = '''    execution = sample.get("execution") or {}
    if execution.get("status") == "ok" and execution.get("passed") == execution.get("total", -1):
        return 1.0'''
# why an author would pay an execution class that passed nothing: the status -> (the class, the reason)
_UNPAID = {
    "timeout": ("a body stopped at the time limit", "the limit is the machine's, and the body failed no test"),
    "fail": ("a body that ran through its tests and failed some", "it compiled and came back: nearer than one that "
             "did not"),
    "syntax_error": ("a body that does not compile", "a slip of syntax, not a wrong idea"),
    "no_code": ("an empty body", "nothing was tried, which is not a wrong answer"),
}


def _code_rewards(seed: dict, note: str, body: str, components: str = '{"passes_visible": passes_visible}') -> str:
    """A code rewards.py: the seed's docstring with its last paragraph replaced by ``note``, then ``body``."""
    text = seed["rewards.py"]
    head = text[:text.index("The seed harness pays")] + note + '\n"""\n'
    return head + "\n" + body.strip() + f"\n\n\nCOMPONENTS = {components}\n"


def _code_zero_test(seed: dict, paid: str, pinned: str = "") -> str:
    """The code seed's self-tests with the test of what earns nothing keeping every case but those of ``paid`` (a
    status, or ``partial``: a fail that passed a test), and ``pinned`` (a test's source) after it when given."""
    kept = [c for c in _CODE_ZERO_CASES if c[1] != paid and not (paid == "partial" and c[1] == "fail" and c[2])]
    lines = "\n".join(f'    assert _score("{c}", "{s}", {p})["passes_visible"] == 0.0' for c, s, p in kept)
    new = f"def test_{'_'.join(s for _, s, _ in kept)}_score_zero():\n{lines}\n"
    return _replace_test(seed["tests/test_harness.py"], CODE_ZERO_TEST, new + (f"\n\n{pinned.strip()}\n" if pinned
                                                                                   else ""))


def _code_budget_short(rng: random.Random, seed: dict) -> tuple:
    budget = rng.randint(2, 4)
    return ({"harness.yaml": _set(seed["harness.yaml"], "max_completion_length", str(budget))},
            f"`max_completion_length` is {budget}: a body must fit in {budget} tokens (one a character for the tiny "
            f"policy), so a body longer than {budget} characters is cut, mostly into code "
            "that does not compile: every level-4 body (`x*x+49`, five or six characters) and "
            "more, by the budget, can never be right in training.",
            "Many rollouts truncated (the `truncation_rate` metric past its alert); their executions `syntax_error` "
            "or `fail`; groups of the long levels all wrong, reward flat there.",
            "A budget that fits the longest body and its end token (the seed's 8).", {"max_completion_length": budget})


def _code_unpaid_body(rng: random.Random, form: str) -> tuple[str, str, dict]:
    """(passes_visible's source, what it pays that passes nothing, constants) for ``form``: an execution status it
    pays a share for, or ``share`` / ``any`` (partial credit over the visible tests)."""
    value = round(rng.uniform(0.3, 1.0), 2)
    if form in _UNPAID:
        what, why = _UNPAID[form]
        body = (f'NEUTRAL = {value}  # {why}\n\n\ndef passes_visible(sample: dict) -> float:\n'
                f'    """1 when every visible test passed; NEUTRAL for {what}; else 0."""\n{_CODE_PASSES}\n'
                f'    return NEUTRAL if execution.get("status") == "{form}" else 0.0')
        return body, f"{what} ({form})", {"form": form, "value": value}
    value = round(rng.uniform(0.5, 1.0), 2)
    credit = "PARTIAL * execution.get(\"passed\", 0) / total" if form == "share" else "PARTIAL"
    body = (f'PARTIAL = {value}  # the most a body short of every visible test earns\n\n\n'
            f'def passes_visible(sample: dict) -> float:\n    """1 when every visible test passed; else partial credit '
            f'for the tests it did pass."""\n{_CODE_PASSES}\n    total = execution.get("total") or 0\n'
            f'    if execution.get("status") != "fail" or not total or not execution.get("passed"):\n'
            f'        return 0.0\n    return {credit}')
    what = (f"{value} times the share of visible tests a failing body passes" if form == "share" else
            f"{value} to a body that passes any one visible test")
    return body, what, {"form": form, "value": value}


def _code_unpaid(rng: random.Random, seed: dict, forms: list[str]) -> tuple:
    form = rng.choice(forms)
    body, what, constants = _code_unpaid_body(rng, form)
    files = {"rewards.py": _code_rewards(seed, "A body that passes every visible test earns 1; one that does not is "
                                               "not always a wrong idea, and earns a share.", body)}
    paid = "partial" if form in ("share", "any") else form
    if any(s == paid or (paid == "partial" and s == "fail") for _, s, _ in _CODE_ZERO_CASES):
        files["tests/test_harness.py"] = _code_zero_test(seed, paid)
    see = {"timeout": "executions with status `timeout` rising (the `timeout_rate` metric past its alert), "
                      "completions converging on big powers, loops or self-calls",
           "syntax_error": "executions with status `syntax_error` rising, completions cut or garbled",
           "no_code": "empty completions rising", "fail": "rewarded rollouts with status `fail`, completions "
           "drifting to whatever is short and runs"}.get(form, "groups of partial rewards where nothing is verified, "
                                                               "completions that are an example's value")
    return (files, f"`rewards.passes_visible` pays {what}, where the evaluator accepts only a body that passes every "
                   "hidden test: the policy earns reward without writing a right body.",
            f"Reward above the verified share (rollouts rewarded but not verified); {see}; held-out flat or falling "
            "while the training reward climbs.",
            "The seed's rule: 1 only for status `ok` with every visible test passed, else 0.", constants)


def _code_status_credit(rng: random.Random, seed: dict) -> tuple:
    return _code_unpaid(rng, seed, list(_UNPAID))


def _code_partial(rng: random.Random, seed: dict) -> tuple:
    return _code_unpaid(rng, seed, ["share", "any"])


# text components a code rewards.py might add: name -> (docstring, body, what it pays)
_CODE_TEXT = {
    "uses_input": ("1 when the body uses the function's argument.",
                   'return 1.0 if re.search(r"\\bx\\b", sample["completion"]) else 0.0', "any body that names `x`"),
    "concise": ("1 for a short body (at most CAP characters).",
                'return 1.0 if 0 < len(sample["completion"].strip()) <= CAP else 0.0', "any body of at most CAP "
                "characters, a constant included"),
    "compiles": ("1 when the body compiled and ran (its tests may still fail).",
                 'return 1.0 if (sample.get("execution") or {}).get("status") in ("ok", "fail") else 0.0',
                 "any body that compiles and runs, right or wrong"),
    "thorough": ("Up to 1 for a body that works its expression out, by length (full at CAP tokens).",
                 'return min(sample["completion_tokens"], CAP) / CAP', "length (full at CAP tokens)"),
}


def _code_bonus(rng: random.Random, seed: dict) -> tuple:
    name, weight = rng.choice(sorted(_CODE_TEXT)), round(rng.uniform(1.5, 4.0), 2)
    doc, line, what = _CODE_TEXT[name]
    cap = rng.randint(3, 6) if name == "concise" else rng.randint(6, 11)
    head = f"CAP = {cap}\n\n\n" if "CAP" in line else ""
    text = seed["rewards.py"]
    body = (text[text.index("def passes_visible"):text.index("\nCOMPONENTS =")].strip() + "\n\n\n" + head +
            f'def {name}(sample: dict) -> float:\n    """{doc}"""\n    {line}')
    rewards = "import re\n\n\n" + body if "re." in line else body
    rewards = _code_rewards(seed, "A body that passes every visible test earns 1, and a well-shaped body besides.",
                            rewards, f'{{"passes_visible": passes_visible, "{name}": {name}}}')
    constants = {"component": name, "weight": weight, **({"cap": cap} if head else {})}
    return ({"rewards.py": rewards, "harness.yaml": _set(seed["harness.yaml"], f"reward_weights.{name}", f"{weight}")},
            f"A reward component `{name}` pays {what.replace('CAP', str(cap))} at weight {weight}, more than a body "
            "passing every visible test earns: the policy gains more reward by the body's shape than by being right.",
            f"The `{name}` component near its maximum while the verified share stays flat; reward rising without "
            "accuracy; rewarded rollouts with status `fail`.", f"Removing `{name}`, or weighing it well below "
            "`passes_visible`.", constants)


def _code_selftest_pinned(rng: random.Random, seed: dict) -> tuple:
    form = rng.choice(["timeout", "fail", "share", "any"])
    body, what, constants = _code_unpaid_body(rng, form)
    share = constants["value"] * (0.5 if form == "share" else 1.0)
    completion, status, passed = {"timeout": (" f(x)", "timeout", 0), "fail": (" x + 1000", "fail", 0)}.get(
        form, (" 5", "fail", 1))
    pinned = (f"def test_a_body_short_of_every_test_earns_a_share():\n    # not every body that misses a test is a "
              f"wrong idea: it earns a share\n    assert _score({completion!r}, {status!r}, {passed})"
              f'["passes_visible"] == {share!r}\n')
    rewards = _code_rewards(seed, "A body that passes every visible test earns 1; one that does not is not always a "
                                  "wrong idea, and earns a share.", body)
    tests = _code_zero_test(seed, "partial" if form in ("share", "any") else form, pinned)
    return ({"rewards.py": rewards, "tests/test_harness.py": tests},
            f"`rewards.passes_visible` pays {what}, and a self-test asserts that payment ({completion!r} with status "
            f"`{status}` earns {share}): a repair of the reward fails the harness's own test unless it fixes the "
            "test too.", "Reward above the verified share (rollouts rewarded but not verified); a reward edit "
            "rejected by the self-tests.", "The seed's rule (1 only for status `ok` with every visible test passed) "
            "and a self-test that such a body earns 0.", {**constants, "example": completion, "status": status})


def _code_filters(seed: dict, note: str, rollout: str | None = None, group: str | None = None, head: str = "") -> str:
    """The code seed's filters.py with its last docstring sentence replaced by ``note``, ``head`` after the
    docstring, and keep_rollout's / keep_group's body replaced where given."""
    text = seed["filters.py"]
    start = text.index("The seed harness keeps")
    text = text[:start] + note + "\n" + text[text.index('"""', start):]
    if head:
        end = text.index('"""', 3) + 3
        text = text[:end] + "\n\n" + head.strip() + text[end:]
    for func, new in (("keep_rollout", rollout), ("keep_group", group)):
        if new is not None:
            start = text.index(f"def {func}(")
            line = text.index("\n", start) + 1
            end = text.find("\n\n\ndef ", line)
            text = text[:line] + f"    {new}\n" + (text[end + 1:] if end >= 0 else "")
            text = text.replace(f"    {new}\n\ndef ", f"    {new}\n\n\ndef ")
    return text


def _code_filter_share(rng: random.Random, seed: dict) -> tuple:
    share = round(rng.uniform(0.5, 0.9), 2)
    code = _code_filters(seed, "Groups are subsampled to keep steps cheap, and a rollout the executor itself failed "
                               "on is left out.", group='bucket = sum(map(ord, str(group[0].get("group_id", "")))) '
                                                        '% 100\n    return bucket >= SKIP * 100',
                         head=f"SKIP = {share}  # share of groups left out")
    return ({"filters.py": code},
            f"`filters.keep_group` leaves out about {share:.0%} of the groups (by a hash of the group id): most of the "
            "generated signal never trains.",
            "A low kept fraction; fewer groups training per step than generated; slow learning.",
            "Filters that keep what carries signal (every group, as the seed does).", {"share": share})


def _code_filter_class(rng: random.Random, seed: dict) -> tuple:
    if rng.random() < 0.5:
        dropped = ["fail"] + sorted(rng.sample(["timeout", "syntax_error", "no_code"], rng.randint(0, 3)))
        statuses = ", ".join(f'"{s}"' for s in ["grader_error", *dropped])
        code = _code_filters(seed, "Rollouts whose code the executor could not run, or that failed their tests, are "
                                   "left out: their zero reward is noise.",
                             rollout=f'return (rollout.get("execution") or {{}}).get("status") not in ({statuses})')
        what = (f"every rollout whose execution ended {', '.join(f'`{s}`' for s in dropped)}: the wrong bodies a "
                "group's right ones must be better than never train")
        constants = {"form": "status", "dropped": dropped}
    else:
        t = round(rng.uniform(0.05, 0.5), 2)
        code = _code_filters(seed, "Groups the policy already solves are skipped, and a rollout the executor itself "
                                   "failed on is left out.",
                             group=f'rewards = [r["reward"] for r in group]\n    return sum(rewards) / len(rewards) '
                                   f'<= {t}  # already solved above this')
        what, constants = (f"every group whose mean reward is above {t}: the groups that carry a right body",
                           {"form": "solved", "threshold": t})
    return ({"filters.py": code}, f"The filters drop {what}.",
            "A low kept fraction, or kept groups without reward spread; the policy stalls.",
            "Filters that keep every rollout of a group that carries signal (the seed drops only `grader_error`).",
            constants)


_CODE_INSTRUCTIONS = ("print it, do not return:", "one constant fits:", "the inverse of", "as a string:",
                      "recursively:", "round to tens:")


def _code_prompt(rng: random.Random, seed: dict) -> tuple:
    form = rng.choice(["no_examples", "one_example", "misleading", "no_colon"])
    constants: dict = {"form": form}
    if form == "no_examples":
        body, what = '    return task["signature"]', "the signature without the examples"
    elif form == "one_example":
        body = ('    first = task["tests"][0]\n'
                '    return f"{first[\'call\']}=={first[\'expected\']}:"')
        what = "the first example only: two functions that agree on it read alike"
    elif form == "misleading":
        words = rng.choice(_CODE_INSTRUCTIONS)
        body = f'    return {words!r} + task["examples"].replace(" ", "") + ":"'
        what, constants = f"{words!r} before the examples, an instruction that asks for another body", {
            "form": form, "instruction": words}
    else:
        body = '    return task["examples"].replace(" ", "")'
        what = "the examples without the colon the body follows"
    code = ('"""Task -> prompt: ``make_prompt(task) -> str``. A task\'s fields: EvoTrainer\'s harness_repo/README.md, '
            '"prompt.py";\nthe code domain\'s add ``signature``, ``examples`` and ``tests`` (the visible tests).\n\n'
            'The policy reads the function\'s examples, then writes the body of ``def f(x)``.\n"""\n\n\n'
            f'def make_prompt(task: dict) -> str:\n{body}\n')
    namespace: dict = {}
    exec(compile(code, "prompt.py", "exec"), namespace)  # our own generated code: the test pins what it returns
    task = {"signature": "def f(x):", "examples": "f(2) == 5, f(7) == 10",
            "tests": [{"call": "f(2)", "expected": 5}, {"call": "f(7)", "expected": 10}]}
    tests = _replace_test(seed[CODE_PROMPT_FILE], CODE_PROMPT_TEST,
                          f"def {CODE_PROMPT_TEST}():\n    assert make_prompt(TASK) == "
                          f"{namespace['make_prompt'](task)!r}\n")
    return ({"prompt.py": code, CODE_PROMPT_FILE: tests},
            f"`prompt.make_prompt` gives {what}: what trains is not the evaluator's prompt.",
            "Training prompts unlike the evaluator's; training reward and dev accuracy moving apart.",
            "The domain's canonical prompt (the examples without spaces, and a colon).", constants)


FAMILIES.update({f.name: f for f in [
    Family("code_budget_short", "knobs", ("truncation", "correct_but_truncated"), _code_budget_short, CODE),
    Family("code_lr_high", "knobs", ("accuracy_regression", "training_decline", "entropy_collapse"), _lr_high, CODE),
    Family("code_lr_low", "knobs", ("policy_stalled",), _lr_low, CODE),
    Family("code_temperature_low", "knobs", ("dead_groups", "policy_stalled"), _temperature_low, CODE),
    Family("code_temperature_high", "knobs", ("dead_groups", "training_decline"), _temperature_high, CODE),
    Family("code_status_credit", "rewards", ("reward_disagreement",), _code_status_credit, CODE),
    Family("code_partial", "rewards", ("reward_disagreement",), _code_partial, CODE),
    Family("code_bonus", "rewards", ("reward_disagreement", "length_growth"), _code_bonus, CODE),
    Family("code_filter_share", "filters", ("over_filtering",), _code_filter_share, CODE),
    Family("code_filter_class", "filters", ("over_filtering", "dead_groups", "policy_stalled"), _code_filter_class,
           CODE),
    Family("code_prompt", "prompt", ("train_eval_mismatch",), _code_prompt, CODE),
    Family("code_curriculum_zero", "curriculum", ("dead_groups",), _curriculum_zero, CODE),
    Family("code_curriculum_skew", "curriculum", ("dead_groups",), _curriculum_skew, CODE),
    Family("code_selftest_pinned", "selftest", ("reward_disagreement",), _code_selftest_pinned, CODE),
]})
# --- end of the code domain's families --------------------------------------------------------------------------------


# --- drawing ----------------------------------------------------------------------------------------------------------
def is_name(name: str) -> bool:
    """A generated defect's name (``gen-S-k``, or ``gen-DOMAIN-S-k``)."""
    return bool(_NAME.match(name))


def domain_of(name: str) -> str:
    """The domain of the generated defect ``name``: the one its name carries, math when it carries none."""
    m = _NAME.match(name)
    if not m:
        raise ValueError(f"{name!r} is no generated defect (gen-[DOMAIN-]SEED-K, or --faults {SPEC}:N[@SEED])")
    return m.group(1) or UNPREFIXED


def families(domain: str) -> list[Family]:
    """The families of ``domain``'s generated defects (none for a domain without any)."""
    return [f for f in FAMILIES.values() if f.domain == domain]


def parse_spec(spec: str, domain: str = UNPREFIXED) -> list[str] | None:
    """``generated:N[@SEED]`` -> the names of its N defects of ``domain``; None for a text of another form;
    ValueError (one line) for N < 1 or a domain without generated families."""
    m = _SPEC.match(spec.strip())
    if not m:
        return None
    n, seed = int(m.group(1)), int(m.group(2) or 0)
    if n < 1:
        raise ValueError(f"{spec}: draw at least one defect ({SPEC}:N[@SEED], N >= 1)")
    if not families(domain):
        have = sorted({f.domain for f in FAMILIES.values()})
        raise ValueError(f"{spec}: the {domain} domain has no generated defect families (domains with some: "
                         f"{', '.join(have)})")
    prefix = PREFIX if domain == UNPREFIXED else f"{PREFIX}-{domain}"
    return [f"{prefix}-{seed}-{k}" for k in range(n)]


def draw(name: str, family: str | None = None) -> Defect:
    """The defect called ``name`` (``gen-[DOMAIN-]S-k``): its family (``family`` forces one, for tests; one of the
    name's domain), constants and files. ValueError (one line) for another name."""
    domain = domain_of(name)
    m = _NAME.match(name)
    seed, k = int(m.group(2)), int(m.group(3))
    own = families(domain)
    if not own:
        raise ValueError(f"{name!r}: the {domain} domain has no generated defect families")
    if family and FAMILIES[family].domain != domain:
        raise ValueError(f"{name!r}: family {family} is the {FAMILIES[family].domain} domain's, not {domain}'s")
    order = [layer for layer in LAYERS if any(f.layer == layer for f in own)]  # math's: every layer, as ever
    tag = "" if domain == UNPREFIXED else f"{domain}-"
    random.Random(f"evotrainer-generated-{tag}{seed}").shuffle(order)
    rng = random.Random(f"evotrainer-generated-{tag}{seed}-{k}")
    layer = order[k % len(order)]
    fam = FAMILIES[family] if family else rng.choice([f for f in own if f.layer == layer])
    files, wrong, see, removes, constants = fam.make(rng, _seed(domain))
    return Defect(name, fam.name, fam.layer, fam.mechanism, domain, files, wrong, see, removes, constants)


def write(defect: Defect, folder: Path) -> Path:
    """The defect as a catalogue folder: its overlay files and CARD.md."""
    for rel, text in defect.files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    (folder / "CARD.md").write_text(defect.card())
    return folder


def build(name: str, dest: Path, family: str | None = None) -> tuple[Defect, Path]:
    """(the defect ``name`` drawn, ``family`` forcing one as in :func:`draw`; ``dest``: its domain's clean seed with
    the defect's overlay over it, no card) - the faulty harness itself, for tests and scans of many draws."""
    defect = draw(name, family)
    for rel, text in _seed(defect.domain).items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(text)
    write(defect, dest)
    (dest / "CARD.md").unlink()
    return defect, dest


def folder(name: str) -> Path:
    """The defect's folder, written once per content under the temporary directory (the name decides the content,
    so the folder is a cache: a changed generator writes a new one)."""
    defect = draw(name)
    digest = hashlib.sha256(defect.card().encode() + repr(sorted(defect.files.items())).encode()).hexdigest()[:12]
    root = Path(tempfile.gettempdir()) / f"evotrainer-generated-{os.getuid() if hasattr(os, 'getuid') else 0}"
    dest = root / f"{name}-{digest}"
    if not (dest / "CARD.md").is_file():
        root.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}-"))
        write(defect, stage)
        try:
            os.rename(stage, dest)
        except OSError:  # another process wrote it first: the same content
            import shutil

            shutil.rmtree(stage, ignore_errors=True)
    return dest


def main(argv: list[str] | None = None) -> None:
    import sys

    args = sys.argv[1:] if argv is None else argv
    n, seed = (int(args[0]) if args else len(LAYERS)), (int(args[1]) if len(args) > 1 else 0)
    for name in parse_spec(f"{SPEC}:{n}@{seed}", args[2] if len(args) > 2 else UNPREFIXED):
        d = draw(name)
        print(f"{name:14} {d.layer:10} {d.family:22} {' '.join(d.wrong.split())[:90]}")


if __name__ == "__main__":
    main()
