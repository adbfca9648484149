"""Diagnostician: reads the phase's rollouts and history, and says what is failing, with evidence.

The built-in (heuristic) Diagnostician computes a health report in four layers and turns each rule that fires
into a Diagnosis carrying its figures with 95% intervals and example rollout ids. Every failure mode it emits is
registered in ``agents/modes.py`` (its layer is the registry's, and the question it answers decides the Critic's
ranking); by layer, its rules (failure mode, question):

    score     dev accuracy against the best earlier phase or the starting policy, paired per dev task
              (accuracy_regression, harm); the verified share of training rollouts falling on an unchanged harness,
              the reward with it (training_decline, overshoot); the dev split's verdicts unchanged since the
              checkpoint the phase trained from while the training reward has no trend (policy_stalled, stalled)
    signal    dead-group ratio (dead_groups), dead groups that still train (diluted_batch), kept fraction
              (over_filtering), all signal
    behavior  format failures (format_failures), truncation (truncation) and verified-correct-but-truncated
              (correct_but_truncated), with the length the dev evaluation's completions end within when its budget
              does not cut them, and the completion-length trend (length_growth), all behavior; reward/verified
              disagreement, overall, as the share of right answers unrewarded or of rewarded ones wrong (a wrong
              answer trained toward, with a positive advantage, counts as rewarded), and per reward component
              (reward_disagreement, objective); the policy's entropy falling within the phase with
              no reward gain, a step that overshoots (entropy_collapse, overshoot); training's right answers that
              the evaluator's shorter budget scores wrong, or training on prompts that are not the evaluator's while
              training's verified share rises beyond what dev accuracy does (train_eval_mismatch, mismatch)
    version   accuracy lost right after a promoted harness edit (edit_regression, harm)

and, on multi-turn rollouts only (silent where no rollout called a tool), behavior: rollouts the turn cap stopped
while still calling (turn_cap_hit), tool calls answered with an error (tool_errors), and needless calls, repeats or
beyond what the level's verified-correct rollouts make (tool_spam).

Rules fire on the point estimate crossing a threshold; how sure the evidence is (the interval against the
threshold) becomes the diagnosis's confidence, which the Critic judges. The thresholds are ``THRESHOLDS``; none is a
constant of a catalogued defect or of a seed harness.

Alone: ``python -c "from agents.diagnostician import THRESHOLDS; print(THRESHOLDS)"``.
"""

from __future__ import annotations

import math

import agents.modes as modes
from agents.roles import PhaseEvidence
from evotrainer.contracts import Diagnosis, EvalResult, MetricEvidence
from evotrainer.judge.checks import MIN_ANSWERS_CHANGED
from evotrainer.metrics import (accuracy_change, quarter_shift, rate_evidence, ratio_evidence, unpaired_margin,
                                wilson)
from evotrainer import behaviour
from evotrainer.behaviour import calls_needed, format_failed, needless_calls, stopped_short, turn
from evotrainer.rollouts import groups_of, is_dead

CREDITS_WRONG = "credits_wrong:"  # evidence name prefix: the share of rewarded-but-wrong rollouts a component credits
MISSES_RIGHT = "misses_right:"  # evidence name prefix: the share of correct-but-unrewarded rollouts a component gives 0
UNCUT_LENGTH = "dev_ended_length_p99"  # evidence: tokens within which 99% of the dev completions end (now or at start)
PERCENTILE_UNITS = 100  # completions a 99th percentile needs before it is cited
CALLS_NEEDED = "tool_calls_needed"  # evidence: the most calls any level needs, by its verified-correct rollouts
# (cited only where every level has enough of them to say)

THRESHOLDS = {
    "dead_group_ratio": 0.35,
    "kept_dead_ratio": 0.25,
    "kept_fraction_min": 0.2,
    "format_failure_rate": 0.10,
    "truncation_rate": 0.10,
    "correct_truncated_rate": 0.05,
    "disagreement_rate": 0.03,
    "disagreement_share": 0.5,  # of the right answers (or of the rewarded ones): scale-free when few are right
    "length_growth": 0.5,
    "entropy_drop": 0.10,  # of the first quarter's entropy, within one phase, with no reward gain to show for it
    # the share of dev items whose verdict changed over a phase under which the policy counts as not moving: the
    # gate's own bar for a trial that moved anything (judge.checks.MIN_ANSWERS_CHANGED), so a policy the rule calls
    # stalled is one a trial could not tell from its starting point either
    "stalled_changed_share": MIN_ANSWERS_CHANGED,
}
# The tool-use rules (multi-turn rollouts only) take the thresholds of their single-turn counterparts, each the same
# quantity for another budget or another reader: a rollout the turn cap stops cannot give its answer, as one the
# length budget cuts; a tool call the environment cannot answer is a malformed answer to the tool, as a format
# failure is to the evaluator; a needless call spends a turn and budget tokens on nothing the answer needs, a defect
# in that many of the calls as the format rule's in that many completions.
THRESHOLDS["turn_cap_rate"] = THRESHOLDS["truncation_rate"]
THRESHOLDS["tool_error_rate"] = THRESHOLDS["format_failure_rate"]
THRESHOLDS["needless_call_share"] = THRESHOLDS["format_failure_rate"]
# train_eval_mismatch's budget channel reads the share of training's right answers that the evaluator's budget cuts
# to a wrong one against correct_truncated_rate: the same quantity (right answers lost to a budget) for the other
# budget, so one threshold serves both


def _mode(name: str) -> dict[str, str]:
    """A diagnosis's failure mode and layer, from the registry (``agents.modes``; ValueError for one not there)."""
    return {"failure_mode": name, "layer": modes.get(name).layer}


def _examples(rows: list[dict], k: int = 5) -> list[str]:
    return [f"{r['group_id']}/{r['sample_idx']}" for r in rows[:k]]


def _confidence(ev: MetricEvidence, direction: str) -> float:
    """How far the interval clears the threshold: 0.9 when all of it does, 0.5 when only the estimate does."""
    if ev.threshold is None:
        return 0.5
    clear = ev.low > ev.threshold if direction == "above" else ev.high < ev.threshold
    return 0.9 if clear else 0.5


def _severity(value: float, threshold: float, span: float) -> float:
    return max(0.05, min(1.0, (value - threshold) / span + 0.3))


def _kept_dead(group: list[dict]) -> tuple[float, float]:
    """(1 if the group still trains but without reward spread, 1 if it still trains) for the kept-dead ratio."""
    kept = [r for r in group if r["kept"]]
    return (bool(kept) and is_dead(kept), bool(kept))


def _with_unconstrained_length(ev: PhaseEvidence, d: Diagnosis | None) -> Diagnosis | None:
    """A truncation diagnosis with what the policy writes when the budget does not cut it: the 99th percentile of
    the lengths of the dev evaluation's completions that ended (its budget is the evaluator's, not the harness's),
    now and for the starting policy. Training under a short budget teaches the policy to stop early (a budget of 2
    left the tiny policy writing at most 4 tokens where it started at 6), so the longer of the two is cited
    (``UNCUT_LENGTH``). An evaluation that cut more than 1% of its completions is left out, said so: its ended
    ones are a censored sample. The Engineer's budget move sizes the new budget from it (``agents.playbook``)."""
    if d is None or not ev.results:
        return d
    seen, said = [], []
    for who, dev in (("now", ev.current.dev), ("for the starting policy", ev.baseline)):
        lengths = dev.ended_length if dev is not None else {}
        if lengths.get("n", 0) < PERCENTILE_UNITS:
            continue
        budget = int(lengths["budget"])
        if dev.truncated_rate > 0.01:
            d.statement += (f" The dev evaluation's own budget of {budget} tokens cuts {dev.truncated_rate:.0%} of "
                            f"its completions {who} too, so how long those answers run is not known "
                            f"(training.eval_max_new_tokens sets that budget).")
            continue
        seen.append((lengths["p99"], int(lengths["n"]), budget))
        said.append(f"within {lengths['p99']:.0f} tokens {who}")
    if seen:
        p99, n, budget = max(seen)
        d.evidence.append(MetricEvidence(name=UNCUT_LENGTH, value=p99, low=p99, high=p99, n=n))
        d.statement += (f" At the dev evaluation's budget of {budget} tokens, 99% of the completions that end do so "
                        f"{' and '.join(said)} (end-of-sequence included).")
    return d


def _before(result) -> MetricEvidence:
    """The dev accuracy a regression fell from (an EvalResult), with its Wilson interval: how large the fall is
    relative to it tells a collapse from a regression (the Engineer's learning-rate moves read it)."""
    low, high = wilson(result.accuracy * result.n, result.n)
    return MetricEvidence(name="dev_accuracy_before", value=result.accuracy, low=low, high=high, n=result.n)


def growing_certain(trajectory: dict[str, list[float]], threshold: float):
    """The entropy-collapse rule's condition on a phase's per-step log: the entropy's and the reward's
    ``quarter_shift`` when the entropy's last quarter is below its first by more than ``threshold`` of it (the
    interval clear of 0) and the reward's shift is not clear of 0 upwards; None otherwise."""
    entropy, reward = quarter_shift(trajectory.get("entropy", [])), quarter_shift(trajectory.get("reward", []))
    if entropy is None or reward is None or entropy[0] <= 0:
        return None
    start, end, _, high = entropy
    return (entropy, reward) if (start - end) / start > threshold and high < 0 and reward[2] <= 0 else None


def changed_items(before: EvalResult, after: EvalResult) -> tuple[int, int]:
    """(items whose score changed from ``before`` to ``after``, items both scored): how many of the evaluator's
    verdicts a stretch of training changed (under greedy decoding a verdict flips; under sampling its share moves)."""
    common = set(before.items) & set(after.items)
    return sum(abs(after.items[k] - before.items[k]) > 1e-9 for k in common), len(common)


def verified_shift(rows: list[dict]) -> tuple[MetricEvidence, MetricEvidence] | None:
    """The verified share of training rollouts in the first and in the last quarter of a phase's steps, each with a
    bootstrap interval over groups (a group's completions share a prompt); None for fewer than 8 steps."""
    steps = sorted({r["step"] for r in rows})
    if len(steps) < 8:
        return None
    q = len(steps) // 4
    out = []
    for name, part in (("first", set(steps[:q])), ("last", set(steps[-q:]))):
        out.append(ratio_evidence(f"training_verified_{name}_quarter", [r for r in rows if r["step"] in part],
                                  lambda g: (sum(r["verified"] for r in g), len(g))))
    return out[0], out[1]


def evaluator_prompts(domain, task: dict) -> set[str]:
    """The prompts the evaluator shows a policy for ``task``, as the rollout log writes a prompt: the canonical text
    (a plain policy) and the domain's instruction as one user message (a chat-template policy, ``as_text``'s form)."""
    return {domain.canonical_prompt(task), f"user: {domain.instruction(task)}"}


def cut_at(row: dict, budget: int) -> str | None:
    """A training completion as an evaluation budget of ``budget`` tokens would leave it, or None when it fits. The
    log keeps text, not token ids: the text is cut at the completion's own characters per token."""
    text_tokens = row["completion_tokens"] - (0 if row["truncated"] else 1)  # an ended one counts its end token
    if text_tokens <= budget:
        return None
    return row["completion"][: len(row["completion"]) * budget // text_tokens]


def _half(e: MetricEvidence) -> float:
    return (e.high - e.low) / 2


def _this_phase(ev: PhaseEvidence) -> list[dict]:
    """The rollouts of the phase just trained (an evidence round adds earlier phases' to ``ev.rollouts``)."""
    return [r for r in ev.rollouts if r.get("phase", ev.phase) == ev.phase]


class HeuristicDiagnostician:
    name = "heuristic"

    def diagnose(self, ev: PhaseEvidence) -> list[Diagnosis]:
        out: list[Diagnosis] = []
        prefix = f"d{ev.phase}"
        for rule in (self._score, self._version, self._decline, self._stalled, self._dead_groups, self._diluted,
                     self._kept, self._format, self._truncation, self._correct_truncated, self._disagreement,
                     self._length, self._collapse, self._mismatch, self._turn_cap, self._tool_errors,
                     self._tool_spam):
            d = rule(ev)
            if d is not None:
                d.id = f"{prefix}-{len(out) + 1}"
                out.append(d)
        return out

    # score ----------------------------------------------------------------------------------------------------
    def _score(self, ev: PhaseEvidence) -> Diagnosis | None:
        earlier = [(f"phase {r.phase}", r.dev) for r in ev.results[:-1]]
        if ev.baseline is not None:
            earlier.append(("the starting policy", ev.baseline))
        if not earlier:
            return None
        cur = ev.current.dev
        where, best = max(earlier, key=lambda e: e[1].accuracy)
        change = accuracy_change(best, cur)  # paired per dev task when both scored the same tasks
        if change["high"] >= 0:
            return None
        drop = -change["change"]
        how = "paired on the same dev tasks" if change["method"] == "paired bootstrap" else "unpaired"
        return Diagnosis(
            id="", **_mode("accuracy_regression"),
            statement=f"Dev accuracy fell to {cur.accuracy:.1%} from {best.accuracy:.1%} ({where}): "
                      f"{-drop:+.1%}, 95% CI {change['low']:+.1%} to {change['high']:+.1%} ({how}).",
            evidence=[MetricEvidence(name="dev_accuracy_drop", value=drop, low=-change["high"], high=-change["low"],
                                     n=cur.n, threshold=0.0),
                      _before(best)],
            severity=min(1.0, 0.5 + drop * 5), confidence=0.9,
        )

    def _version(self, ev: PhaseEvidence) -> Diagnosis | None:
        promo = ev.last_promotion
        if not promo or len(ev.results) < 2:
            return None
        cur, prev = ev.current.dev, ev.results[-2].dev
        change = accuracy_change(prev, cur)
        if change["high"] >= 0:
            return None
        drop = -change["change"]
        return Diagnosis(
            id="", **_mode("edit_regression"),
            statement=f"Accuracy fell {drop:.1%} (to {cur.accuracy:.1%}; 95% CI of the change {change['low']:+.1%} "
                      f"to {change['high']:+.1%}) in the first phase trained on {promo.get('branch')} "
                      f"({promo.get('intervention')}).",
            evidence=[MetricEvidence(name="dev_accuracy_drop", value=drop, low=-change["high"], high=-change["low"],
                                     n=cur.n, threshold=0.0),
                      _before(prev)],
            severity=min(1.0, 0.5 + drop * 5), confidence=0.9,
        )

    def _decline(self, ev: PhaseEvidence) -> Diagnosis | None:
        """Training made the policy worse at what it is rewarded for: on an unchanged harness, the share of
        verified-correct training rollouts fell from the phase before, and the training reward fell with it (a
        reward that rises while correctness falls is a hack: the disagreement rule's case). Read from the phases'
        own rollouts, so it needs no accuracy to regress from (a policy that starts at 0% cannot regress) and no
        dev score."""
        if len(ev.results) < 2:
            return None
        prev, cur = ev.results[-2], ev.results[-1]
        if prev.harness_sha != cur.harness_sha:
            return None  # an edit trained in between: whether it hurt is the version rule's question
        before, after = prev.train.get("verified_rate"), cur.train.get("verified_rate")
        reward_before, reward_after = prev.train.get("reward_mean"), cur.train.get("reward_mean")
        if None in (before, after, reward_before, reward_after) or reward_after >= reward_before:
            return None
        n_prev, n_cur = prev.completions, cur.completions
        groups = [[r["verified"] for r in g] for g in groups_of(ev.rollouts).values()]
        if min(n_prev, n_cur) < 20 * max(ev.knobs.group_size, 1) or len(groups) < 20:
            return None
        drop = before - after
        # a group's completions share a prompt, so they are not independent: the binomial variance is scaled by the
        # design effect this phase's groups show (the variance of group means over what independence would give)
        rate = sum(map(sum, groups)) / sum(map(len, groups))
        means = [sum(g) / len(g) for g in groups]
        between = sum((m - rate) ** 2 for m in means) / (len(means) - 1) / len(means)
        independent = rate * (1 - rate) / sum(map(len, groups))
        deff = max(1.0, between / independent) if independent > 0 else float(ev.knobs.group_size)
        half = math.sqrt(deff) * unpaired_margin(before, n_prev, after, n_cur)
        low, high = drop - half, drop + half
        if low <= 0:
            return None
        return Diagnosis(
            id="", **_mode("training_decline"),
            statement=f"On an unchanged harness, verified-correct training rollouts fell to {after:.1%} from "
                      f"{before:.1%} in phase {prev.phase} (95% CI of the drop {low:.1%} to {high:.1%}, design "
                      f"effect {deff:.1f}), and the training reward fell with them ({reward_before:.3f} -> "
                      f"{reward_after:.3f}): the updates make the policy worse at what they reward, a step that "
                      f"overshoots.",
            evidence=[MetricEvidence(name="training_verified_drop", value=drop, low=low, high=high, n=len(groups),
                                     threshold=0.0),
                      MetricEvidence(name="training_verified_before", value=before, low=before, high=before,
                                     n=n_prev)],
            severity=min(1.0, 0.5 + drop / max(before, 1e-9)), confidence=0.9,
        )

    def _stalled(self, ev: PhaseEvidence) -> Diagnosis | None:
        """The policy does not move: the updates change nothing the evaluator sees. Reads the dev split's per-item
        verdicts at the checkpoint the phase trained from and at its end (``PhaseEvidence.start_dev``): fewer than
        ``stalled_changed_share`` of them changed (paired per item; a policy that moves within noise of its accuracy
        still changes verdicts both ways, which this counts and a net accuracy change hides), with room left to
        gain more than that; and the training reward's per-step log without a trend within the phase
        (``quarter_shift``'s interval reaching 0 from both sides: a reward that moves says the policy moves, up or
        down, whatever dev shows). Without per-item dev results, or with fewer than 8 logged steps, it says
        nothing. Why it does not move goes with it: the share of the phase's groups without reward spread (most:
        the update has little to follow) or not (the update has a signal the step does not follow: too small a
        step), the gradient norm and, when logged, the KL per step."""
        start, cur = ev.start_dev(), ev.current.dev
        th = THRESHOLDS["stalled_changed_share"]
        if start is None:
            return None
        changed, n = changed_items(start, cur)
        if not n:
            return None
        e = rate_evidence("dev_items_changed", changed, n, threshold=th)
        if e.value >= th or 1 - cur.accuracy <= th:
            return None  # it moved, or it has no more than the band left to gain
        trajectory = ev.current.trajectory
        reward = quarter_shift(trajectory.get("reward", []))
        if reward is None or not reward[2] <= 0 <= reward[3]:
            return None  # too few steps to tell, or the reward moved within the phase
        evidence = [e, MetricEvidence(name="reward_shift", value=reward[1] - reward[0], low=reward[2],
                                      high=reward[3], n=len(trajectory["reward"]))]
        why = ""
        if rows := _this_phase(ev):
            zero = ratio_evidence("zero_advantage_share", rows, lambda g: (is_dead(g), 1))
            evidence.append(zero)
            why = (f" {zero.value:.0%} of its groups have no reward spread: the update has little signal to follow."
                   if zero.value > THRESHOLDS["dead_group_ratio"] else
                   f" Only {zero.value:.0%} of its groups lack reward spread: the update has a signal that the step "
                   f"(learning rate {ev.knobs.learning_rate:g}) does not follow far enough to change an answer.")
        for name in ("grad_norm", "kl"):
            if values := trajectory.get(name):
                mean = sum(values) / len(values)
                evidence.append(MetricEvidence(name=f"{name}_mean", value=mean, low=min(values), high=max(values),
                                               n=len(values)))
                why += f" Mean {name.replace('_', ' ')} per step: {mean:.3g}."
        where = "the starting policy" if start is ev.baseline else "the checkpoint the phase trained from"
        return Diagnosis(
            id="", **_mode("policy_stalled"),
            statement=f"Phase {ev.phase} changed the verdict on {changed} of {n} dev tasks ({e.value:.1%}, 95% CI "
                      f"{e.low:.1%} to {e.high:.1%}) since {where} (dev accuracy {start.accuracy:.1%} -> "
                      f"{cur.accuracy:.1%}), and the training reward has no trend within the phase ({reward[0]:.3f} "
                      f"-> {reward[1]:.3f}): the policy does not move." + why,
            evidence=evidence, severity=round(0.3 + 0.7 * (1 - cur.accuracy), 3),
            confidence=_confidence(e, "below"),
        )

    # signal ---------------------------------------------------------------------------------------------------
    def _dead_groups(self, ev: PhaseEvidence) -> Diagnosis | None:
        th = THRESHOLDS["dead_group_ratio"]
        e = ratio_evidence("dead_group_ratio", ev.rollouts, lambda g: (is_dead(g), 1), threshold=th)
        if e.value <= th:
            return None
        groups = list(groups_of(ev.rollouts).values())
        dead = [g for g in groups if is_dead(g)]
        solved = sum(all(r["verified"] for r in g) for g in dead)
        unsolved = sum(not any(r["verified"] for r in g) for g in dead)
        dead_ids = {g[0]["group_id"] for g in dead}
        by_level: dict[str, tuple[int, int]] = {}
        for g in groups:
            lv = g[0]["difficulty"]
            total, d = by_level.get(lv, (0, 0))
            by_level[lv] = (total + 1, d + (g[0]["group_id"] in dead_ids))
        levels = ", ".join(f"level {lv}: {d / t:.0%}" for lv, (t, d) in sorted(by_level.items()))
        extra = [rate_evidence("dead_groups_all_correct", solved, len(groups)),
                 rate_evidence("dead_groups_all_wrong", unsolved, len(groups))]
        return Diagnosis(
            id="", **_mode("dead_groups"),
            statement=f"{e.value:.0%} of GRPO groups have no reward spread ({unsolved} all wrong, {solved} all "
                      f"right, of {len(dead)} such groups), so they give no advantage; by level: {levels}.",
            evidence=[e, *extra], rollout_ids=_examples([g[0] for g in dead]),
            severity=_severity(e.value, th, 0.5), confidence=_confidence(e, "above"),
        )

    def _diluted(self, ev: PhaseEvidence) -> Diagnosis | None:
        th = THRESHOLDS["kept_dead_ratio"]
        e = ratio_evidence("kept_dead_ratio", ev.rollouts, _kept_dead, threshold=th, empty=1.0)
        if e.value <= th:
            return None
        return Diagnosis(
            id="", **_mode("diluted_batch"),
            statement=f"{e.value:.0%} of the groups that train have zero advantage: they take batch slots and "
                      f"dilute the per-sequence loss without adding gradient.",
            evidence=[e], severity=_severity(e.value, th, 0.6), confidence=_confidence(e, "above"),
        )

    def _kept(self, ev: PhaseEvidence) -> Diagnosis | None:
        th = THRESHOLDS["kept_fraction_min"]
        rows = ev.rollouts
        kept = sum(r["kept"] for r in rows)
        e = rate_evidence("kept_fraction", kept, len(rows), threshold=th)
        if e.value >= th:
            return None
        return Diagnosis(
            id="", **_mode("over_filtering"),
            statement=f"Only {e.value:.0%} of rollouts pass the harness filters, starving the update.",
            evidence=[e], severity=_severity(th - e.value, 0, 0.3), confidence=_confidence(e, "below"),
        )

    # behavior -------------------------------------------------------------------------------------------------
    @staticmethod
    def _rate_above(metric: str, threshold: str, hits: list[dict], population: list[dict], failure_mode: str,
                    statement, span: float = 0.5) -> Diagnosis | None:
        """A behavior rule: the share of ``population`` in ``hits`` is above its threshold, with an interval."""
        th = THRESHOLDS[threshold]
        if not population:
            return None
        e = rate_evidence(metric, len(hits), len(population), threshold=th)
        if e.value <= th:
            return None
        return Diagnosis(id="", **_mode(failure_mode), statement=statement(e), evidence=[e],
                         rollout_ids=_examples(hits), severity=_severity(e.value, th, span),
                         confidence=_confidence(e, "above"))

    def _format(self, ev: PhaseEvidence) -> Diagnosis | None:
        bad = [r for r in ev.rollouts if format_failed(ev.domain, r)]
        return self._rate_above(
            "format_failure_rate", "format_failure_rate", bad, ev.rollouts, "format_failures",
            lambda e: f"{e.value:.0%} of completions give no answer in the expected format (e.g. "
                      f"{bad[0]['completion'][:20]!r}).")

    def _truncation(self, ev: PhaseEvidence) -> Diagnosis | None:
        cut = [r for r in ev.rollouts if r["truncated"]]
        return _with_unconstrained_length(ev, self._rate_above(
            "truncation_rate", "truncation_rate", cut, ev.rollouts, "truncation",
            lambda e: f"{e.value:.0%} of completions hit max_completion_length "
                      f"({ev.knobs.max_completion_length}) without ending."))

    def _correct_truncated(self, ev: PhaseEvidence) -> Diagnosis | None:
        correct = [r for r in ev.rollouts if r["verified"]]
        cut = [r for r in correct if r["truncated"]]
        return _with_unconstrained_length(ev, self._rate_above(
            "correct_but_truncated_rate", "correct_truncated_rate", cut, correct, "correct_but_truncated",
            lambda e: f"{len(cut)} verified-correct completions ({e.value:.0%} of correct ones) were cut at the "
                      f"length budget: right answers that masking or penalties would punish.", span=0.4))

    def _disagreement(self, ev: PhaseEvidence) -> Diagnosis | None:
        rows = ev.rollouts
        if not rows:
            return None
        rewards = [r["reward"] for r in rows]
        low, high = min(rewards), max(rewards)
        # rewarded: above the middle of the phase's reward range; a reward that cannot tell right from wrong (one
        # value) rewards everything when that value is above 0, and nothing when it is not
        def is_rewarded(r: dict) -> bool:
            return r["reward"] > (low + high) / 2 if high - low >= 1e-9 else low > 0

        # credited: rewarded, or trained toward (a positive advantage): GRPO reinforces what beats its group's mean,
        # so a reward paying a wrong answer a part of what a right one earns trains it wherever it beats the rest of
        # its group, below the middle of the range as it is. A right answer is unrewarded only below the middle (in
        # a group of right answers every advantage is 0)
        def credited(r: dict) -> bool:
            return is_rewarded(r) or float(r.get("advantage") or 0.0) > 0

        rewarded = [r for r in rows if credited(r)]
        false_pos = [r for r in rewarded if not r["verified"]]
        false_neg = [r for r in rows if r["verified"] and not is_rewarded(r)]
        e = rate_evidence("reward_verified_disagreement", len(false_pos) + len(false_neg), len(rows),
                          threshold=THRESHOLDS["disagreement_rate"])
        # A policy that is rarely right hides a blind reward in the overall rate (1% right, all unrewarded, is 1% of
        # rollouts): the share of the right answers the reward misses, or of the rewarded ones that are wrong, shows
        # it at any accuracy. A share leads when the overall rate stays under its threshold; a share on fewer than
        # 20 rollouts is left out of the evidence (the Critic rejects a diagnosis resting on so few).
        shares = [rate_evidence("unrewarded_share_of_correct", len(false_neg), sum(r["verified"] for r in rows),
                                threshold=THRESHOLDS["disagreement_share"]),
                  rate_evidence("wrong_share_of_rewarded", len(false_pos), len(rewarded),
                                threshold=THRESHOLDS["disagreement_share"])]
        lenient = len(false_pos) >= len(false_neg)
        if e.value <= e.threshold:
            e = max((s for s in shares if s.n >= 20), key=lambda s: s.low, default=None)
            if e is None or e.low <= e.threshold:
                return None
            lenient = e.name == "wrong_share_of_rewarded"
        kind = "rewarded but wrong (possible reward hack)" if lenient else "correct but unrewarded"
        # which reward components explain it: one that scores most rewarded-but-wrong rollouts above 0 (lenient), or
        # one that gives most correct-but-unrewarded ones 0 (strict), is the culprit
        prefix, subject = (CREDITS_WRONG, false_pos) if lenient else (MISSES_RIGHT, false_neg)
        names = sorted({c for r in rows for c in r.get("reward_components") or {}})
        per_component = [
            rate_evidence(f"{prefix}{name}", sum(((r.get("reward_components") or {}).get(name, 0.0) > 0) == lenient
                                                 for r in subject), len(subject))
            for name in names]
        verb = "credits" if lenient else "gives 0 to"
        culprits = ", ".join(f"{c.name.removeprefix(prefix)} {verb} {c.value:.0%} of them"
                             for c in per_component if c.value >= 0.5)
        which = "rewarded-but-wrong" if lenient else "correct-but-unrewarded"
        return Diagnosis(
            id="", **_mode("reward_disagreement"),
            statement=f"{(len(false_pos) + len(false_neg)) / len(rows):.1%} of rollouts get a reward that disagrees "
                      f"with the verifier, mostly {kind} ({len(false_pos)} of {len(rewarded)} rewarded or "
                      f"trained-toward ones wrong, "
                      f"{len(false_neg)} of {shares[0].n} verified-correct ones unrewarded)"
                      + (f"; of the {which}, component {culprits}." if culprits else "."),
            evidence=[e, rate_evidence("rewarded_but_wrong", len(false_pos), len(rows)),
                      rate_evidence("correct_but_unrewarded", len(false_neg), len(rows)),
                      *(s for s in shares if s.name != e.name and s.n >= 20), *per_component],
            rollout_ids=_examples(false_pos + false_neg), severity=_severity(e.value, e.threshold, 0.2),
            confidence=_confidence(e, "above"),
        )

    def _length(self, ev: PhaseEvidence) -> Diagnosis | None:
        if len(ev.results) < 2:
            return None
        cur = ev.current.train.get("completion_length")
        prev = ev.results[-2].train.get("completion_length")
        if not cur or not prev:
            return None
        growth = cur / prev - 1
        th = THRESHOLDS["length_growth"]
        if growth <= th:
            return None
        return Diagnosis(
            id="", **_mode("length_growth"),
            statement=f"Mean completion length grew {growth:.0%} in one phase ({prev:.1f} -> {cur:.1f} tokens).",
            evidence=[MetricEvidence(name="completion_length_growth", value=growth, low=growth, high=growth,
                                     n=len(ev.rollouts), threshold=th)],
            severity=_severity(growth, th, 1.0), confidence=0.5,
        )

    def _collapse(self, ev: PhaseEvidence) -> Diagnosis | None:
        """The policy sharpened without being rewarded for it: within the phase, its entropy in the last quarter of
        the steps fell by more than ``entropy_drop`` of the first quarter's (the interval clearing 0), while the
        reward did not rise (its interval reaches 0 or below). Healthy RL sharpens as the reward rises; a step
        that overshoots sharpens on noise. Read within one phase from the trainer's per-step log, so it needs
        neither a second phase on an unchanged harness nor an accuracy to regress from."""
        th = THRESHOLDS["entropy_drop"]
        if (shifts := growing_certain(ev.current.trajectory, th)) is None:
            return None
        (start, end, low, high), reward = shifts
        drop = (start - end) / start
        # what the interval must clear is 0 (the fall is real); the size threshold only keeps small real falls out
        e = MetricEvidence(name="entropy_drop", value=drop, low=-high / start, high=-low / start,
                           n=len(ev.current.trajectory["entropy"]), threshold=0.0)
        return Diagnosis(
            id="", **_mode("entropy_collapse"),
            statement=f"Within phase {ev.current.phase} the policy's entropy fell by {drop:.0%} ({start:.3f} in the "
                      f"first quarter of its steps -> {end:.3f} in the last; 95% CI of the fall {e.low:.0%} to "
                      f"{e.high:.0%}) while the training reward did not rise ({reward[0]:.3f} -> {reward[1]:.3f}): "
                      f"the policy grows certain without being rewarded for it, as when each update overshoots "
                      f"(learning rate {ev.knobs.learning_rate:g}).",
            evidence=[e, MetricEvidence(name="reward_shift", value=reward[1] - reward[0], low=reward[2],
                                        high=reward[3], n=len(ev.current.trajectory["reward"]))],
            severity=_severity(drop, th, 0.3), confidence=_confidence(e, "above"),
        )

    # tool use (multi-turn rollouts: silent where no rollout called a tool) ----------------------------------------
    @staticmethod
    def _by_level(hits: list[dict], rows: list[dict]) -> str:
        levels = sorted({r["difficulty"] for r in rows})
        return ", ".join(f"level {lv}: {sum(r['difficulty'] == lv for r in hits) / n:.0%}" for lv in levels
                         if (n := sum(r["difficulty"] == lv for r in rows)))

    def _turn_cap(self, ev: PhaseEvidence) -> Diagnosis | None:
        """Rollouts the turn cap (``max_turns``) stopped while they still called the tool: they end without a final
        answer, so they cannot be right, as a completion the length budget cuts. A share of the rollouts, with the
        levels it falls on (a cap too low for the longest transcript stops only the levels that need more calls).
        A capped rollout that repeated a call is not counted: it was looping, and a higher cap gives it more turns to
        loop in (``tool_spam`` reads its repeats); only one whose calls were all new was stopped short of its answer."""
        rows = ev.rollouts
        if not any(turn(r, "tool_calls") for r in rows):
            return None
        stopped = [r for r in rows if turn(r, "hit_turn_cap")]
        capped = [r for r in stopped if stopped_short(ev.domain, r)]
        looping, cap = len(stopped) - len(capped), ev.knobs.max_turns
        return self._rate_above(
            "turn_cap_rate", "turn_cap_rate", capped, rows, "turn_cap_hit",
            lambda e: f"{e.value:.0%} of rollouts (95% CI {e.low:.0%} to {e.high:.0%}) were stopped by the turn cap "
                      f"(max_turns {cap}) while still making new tool calls, so they end without a final answer; by "
                      f"level: {self._by_level(capped, rows)}"
                      + (f" ({looping} more the cap stopped were repeating a call)." if looping else "."))

    def _tool_errors(self, ev: PhaseEvidence) -> Diagnosis | None:
        """Tool calls the environment answered with an error (a malformed call, or one asking for what the
        environment lacks), as a share of all the phase's calls, with a group-bootstrap interval (a group's
        rollouts share a task and its environment)."""
        rows = ev.rollouts
        calls = sum(turn(r, "tool_calls") for r in rows)
        if not calls:
            return None
        th = THRESHOLDS["tool_error_rate"]
        e = ratio_evidence("tool_error_rate", rows, lambda g: (sum(turn(r, "tool_errors") for r in g),
                                                               sum(turn(r, "tool_calls") for r in g)), threshold=th)
        if e.value <= th:
            return None
        erring = [r for r in rows if turn(r, "tool_errors")]
        share = rate_evidence("rollouts_with_tool_error", len(erring), len(rows))
        return Diagnosis(
            id="", **_mode("tool_errors"),
            statement=f"{e.value:.0%} of the phase's {calls} tool calls (95% CI {e.low:.0%} to {e.high:.0%}) were "
                      f"answered with an error, in {share.value:.0%} of rollouts (by level: "
                      f"{self._by_level(erring, rows)}): calls the environment cannot serve spend turns and tell the "
                      f"policy nothing.",
            evidence=[e, share], rollout_ids=_examples(erring), severity=_severity(e.value, th, 0.5),
            confidence=_confidence(e, "above"),
        )

    def _tool_spam(self, ev: PhaseEvidence) -> Diagnosis | None:
        """Tool calls the task does not need, as a share of all calls (group-bootstrap interval): a call that
        repeats one the rollout already made (the domain lists a completion's calls: ``Domain.tool_calls_in``), or
        one beyond the calls the level's verified-correct rollouts make (``calls_needed``: the policy's own right
        answers say what a task of the level takes). Cites the most any level needs (``CALLS_NEEDED``), which sizes
        a lower turn cap (``agents.knob_moves``), only where every level of the phase's rollouts says: a level with
        too few right answers may need more calls than the others, and a cap sized without it would stop it."""
        rows = ev.rollouts
        calls = sum(turn(r, "tool_calls") for r in rows)
        if not calls:
            return None
        needed = calls_needed(rows)
        counts = {id(r): needless_calls(r, ev.domain.tool_calls_in(r["completion"]), needed.get(r["difficulty"]))
                  for r in rows}
        th = THRESHOLDS["needless_call_share"]
        e = ratio_evidence("needless_call_share", rows, behaviour.parts(ev.domain, rows)["needless_call_share"],
                           threshold=th)
        if e.value <= th:
            return None
        spam = [r for r in rows if counts[id(r)][1]]
        repeats = sum(c[0] for c in counts.values())
        evidence = [e, rate_evidence("repeated_call_share", repeats, calls)]
        unknown = sorted({r["difficulty"] for r in rows} - set(needed))
        if needed and not unknown:
            most = max(needed.values())
            evidence.append(MetricEvidence(name=CALLS_NEEDED, value=most, low=most, high=most,
                                           n=sum(r["verified"] for r in rows)))
        what = (", ".join(f"level {lv}: {n:g}" for lv, n in sorted(needed.items())) if needed else
                "no level has enough verified-correct rollouts to say")
        if needed and unknown:
            what += f"; level {', '.join(unknown)}: too few verified-correct rollouts to say"
        return Diagnosis(
            id="", **_mode("tool_spam"),
            statement=f"{e.value:.0%} of the phase's {calls} tool calls (95% CI {e.low:.0%} to {e.high:.0%}) are "
                      f"needless, in {len(spam)} rollouts: {repeats} repeat a call the rollout already made, the "
                      f"rest go beyond the calls verified-correct rollouts of their level make ({what}). Needless "
                      f"calls spend turns (max_turns {ev.knobs.max_turns}) and budget tokens on nothing the answer "
                      f"needs.",
            evidence=evidence, rollout_ids=_examples(spam), severity=_severity(e.value, th, 0.5),
            confidence=_confidence(e, "above"),
        )

    # what trains against what is evaluated ---------------------------------------------------------------------
    def _mismatch(self, ev: PhaseEvidence) -> Diagnosis | None:
        """What trains is not what is evaluated, through a channel the harness sets, each read with the evaluator's
        own view of a training rollout (``PhaseEvidence.tasks``):

        budget  the share of training's verified-correct completions that the evaluator's budget (the dev
                evaluation's, ``EvalResult.ended_length["budget"]``) would cut to a wrong answer, above
                ``correct_truncated_rate``: training rewards answers the evaluator scores wrong;
        prompt  training prompts that are not the evaluator's for their task (``evaluator_prompts``), on which the
                verified share rose within the phase (last quarter of the steps against the first, beyond noise)
                by more than dev accuracy moved since the checkpoint the phase trained from (the gap's interval
                above 0): what training learns does not reach the evaluator.

        A gap between training and dev alone is not read as a mismatch: training samples at its temperature and the
        evaluator decodes greedily, so in healthy RL the sampled share rises towards a dev accuracy that stands
        still (the policy sharpens), and a slow learner's samples are right before its greedy answers are. The
        prompt and budget channels do not occur in a harness that trains on what is evaluated."""
        rows = _this_phase(ev)
        if not rows or not ev.tasks:
            return None
        parts = [d for d in (self._cut_by_evaluator(ev, rows), self._other_prompt(ev, rows)) if d is not None]
        if not parts:
            return None
        first = parts[0]
        for d in parts[1:]:
            first.statement += " " + d.statement
            first.evidence += d.evidence
            first.rollout_ids = (first.rollout_ids + d.rollout_ids)[:5]
            first.severity, first.confidence = max(first.severity, d.severity), max(first.confidence, d.confidence)
        return first

    @staticmethod
    def _cut_by_evaluator(ev: PhaseEvidence, rows: list[dict]) -> Diagnosis | None:
        budget = ev.current.dev.ended_length.get("budget")
        right = [r for r in rows if r["verified"] and r["task_id"] in ev.tasks]
        if not budget or not right:
            return None
        budget = int(budget)
        lost = [r for r in right if (text := cut_at(r, budget)) is not None
                and not ev.domain.verify(ev.tasks[r["task_id"]], text)]
        th = THRESHOLDS["correct_truncated_rate"]
        e = rate_evidence("correct_cut_by_evaluator", len(lost), len(right), threshold=th)
        if e.value <= th:
            return None
        return Diagnosis(
            id="", **_mode("train_eval_mismatch"),
            statement=f"The harness trains at max_completion_length {ev.knobs.max_completion_length} and the "
                      f"evaluator scores at {budget} tokens (training.eval_max_new_tokens): {len(lost)} of "
                      f"training's {len(right)} verified-correct completions ({e.value:.0%}, 95% CI {e.low:.0%} to "
                      f"{e.high:.0%}) run past the evaluator's budget and would be scored wrong there (the dev "
                      f"evaluation cut {ev.current.dev.truncated_rate:.0%} of its completions).",
            evidence=[e, MetricEvidence(name="evaluator_budget", value=budget, low=budget, high=budget,
                                        n=len(right))],
            rollout_ids=_examples(lost), severity=_severity(e.value, th, 0.4), confidence=_confidence(e, "above"),
        )

    @staticmethod
    def _other_prompt(ev: PhaseEvidence, rows: list[dict]) -> Diagnosis | None:
        start = ev.start_dev()
        differ = [r for r in rows if r["task_id"] in ev.tasks
                  and r["prompt"] not in evaluator_prompts(ev.domain, ev.tasks[r["task_id"]])]
        if start is None or not differ or (shift := verified_shift(differ)) is None:
            return None
        first, last = shift
        rise, rise_half = last.value - first.value, math.hypot(_half(first), _half(last))
        dev = accuracy_change(start, ev.current.dev)
        gap = rise - dev["change"]
        half = math.hypot(rise_half, (dev["high"] - dev["low"]) / 2)
        if rise - rise_half <= 0 or gap - half <= 0:
            return None
        share = rate_evidence("prompt_not_evaluators", len(differ), len(rows))
        example = differ[0]
        shown = ev.domain.canonical_prompt(ev.tasks[example["task_id"]])
        return Diagnosis(
            id="", **_mode("train_eval_mismatch"),
            statement=f"{share.value:.0%} of training's prompts are not the evaluator's (e.g. "
                      f"{example['prompt'][:60]!r} where the evaluator shows {shown[:60]!r}); on them the verified "
                      f"share rose {first.value:.1%} -> {last.value:.1%} within phase {ev.phase} while dev accuracy "
                      f"moved {dev['change']:+.1%}: a gap of {gap:+.1%} (95% CI {gap - half:+.1%} to "
                      f"{gap + half:+.1%}). What training learns does not reach the evaluator.",
            evidence=[MetricEvidence(name="train_dev_divergence", value=gap, low=gap - half, high=gap + half,
                                     n=min(first.n, last.n), threshold=0.0), share, first, last],
            rollout_ids=_examples(differ), severity=min(1.0, 0.5 + gap), confidence=0.9,
        )
