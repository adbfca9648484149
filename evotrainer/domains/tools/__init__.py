"""Tool-use domain: answer a question whose facts sit in a hidden table reachable only through a ``get`` tool.

Each task has its own table of keys and values (``table``, an evaluator-only field: ``hidden_fields``), derived from
the task alone, so every completion of a GRPO group meets the same environment. The policy calls the tool by
writing ``get(KEY)``; the environment answers ``=VALUE;`` (or ``=error;`` for a key the table lacks), and those
characters are the environment's: the rollout's environment mask keeps them out of the loss
(``evotrainer.trainer.shapes``). The final answer is what the policy writes after its last tool result. A
transcript of a level-4 task, prompt then completion, environment characters in brackets::

    ABC+def=get(ABC)[=42;]get(def)[=5;]47

Levels, each a set of prompt shapes (readable from the prompt's text, so the levels' prompt spaces are disjoint):

    level  prompt   answer                                    tool calls needed   distinct prompts
    1      abc=       the value of one lowercase key (0-9)      1                   17,576
    2      ABC=       the value of one uppercase key (10-99)    1                   17,576
    3      abc+def=   the sum of two lowercase keys' values     2                   308,915,776
    4      ABC+def=   the sum of an uppercase and a lowercase   2                   308,915,776

Values are a function of the prompt (a hash of it), never of a key alone, so no table can be learnt across tasks:
held-out prompts are never trained on, and their answers are reachable only through the tool. Tasks are made from
the seed as in ``evotrainer.domains.math`` (held-out drawn first, then dev, then the RL and warm-up pools from what
is left; no prompt in two splits). The verifier reads the text after the last tool result: it must be the integer
answer and nothing else. A transcript is one line, so the tiny character-level policy's budget fits it.

The tiny policy's warm-up teaches the transcript (``reference_completion``); its near miss answers from memory,
without calling the tool (a guess), which RL then learns to replace with a call. Try it alone::

    python -c "from evotrainer.domains.tools import ToolsDomain; d = ToolsDomain(); \
               t = d.splits(0, {'dev': 4})['dev'][3]; print(d.canonical_prompt(t), d.reference_completion(t))"
"""

from __future__ import annotations

import hashlib
import random
import re
import string
from dataclasses import dataclass, field

from evotrainer.domains.base import ID_PREFIX, SPLITS, Domain, Task
from evotrainer.domains.draws import distinct, per_level

LOWER, UPPER = string.ascii_lowercase, string.ascii_uppercase
# level -> the case of each key of its prompt ("l": lowercase key, value 0-9; "u": uppercase key, value 10-99)
LEVELS: dict[str, tuple[str, ...]] = {"1": ("l",), "2": ("u",), "3": ("l", "l"), "4": ("u", "l")}
KEYS = 26 ** 3  # three-letter keys
DECOYS = 3  # keys in each task's table beside the ones its question names
TOOL = "get"
CALL = re.compile(rf"{TOOL}\(([^()]*)\)")  # one tool call, as the policy writes it
RESULT = re.compile(r"=([^;]*);")  # one tool result, as the environment writes it
TURN_END = ")"  # a policy turn ends at a tool call's closing bracket (or at end-of-sequence: its final answer)
ERROR = "error"
EVAL_TURN_CAP = 4  # policy turns the evaluator allows a held-out task (a harness's own cap is harness.yaml's)


def space_size(level: str) -> int:
    return KEYS ** len(LEVELS[level])


def _key(case: str, index: int) -> str:
    letters = LOWER if case == "l" else UPPER
    return letters[index // 676] + letters[index // 26 % 26] + letters[index % 26]


def _value(prompt: str, key: str, case: str) -> int:
    """The value of ``key`` in the table of the task whose prompt is ``prompt``: a hash of both."""
    h = int.from_bytes(hashlib.blake2b(f"{prompt}|{key}".encode(), digest_size=4).digest(), "big")
    return h % 10 if case == "l" else 10 + h % 90


def make_task(task_id: str, level: str, index: int) -> Task:
    """The ``index``-th task of a level's prompt space."""
    cases, keys = LEVELS[level], []
    for case in cases:
        index, i = divmod(index, KEYS)
        keys.append(_key(case, i))
    prompt = "+".join(keys) + "="
    rng = random.Random(prompt)
    decoys = [_key(c, rng.randrange(KEYS)) for c in rng.choices("lu", k=DECOYS)]
    table = {k: _value(prompt, k, "l" if k.islower() else "u") for k in decoys}
    table.update({k: _value(prompt, k, c) for k, c in zip(keys, cases)})
    return {"id": task_id, "difficulty": level, "keys": keys, "table": table,
            "question": f"Use the {TOOL} tool to look up {' and '.join(keys)}; reply with "
                        + ("the value." if len(keys) == 1 else "the sum of their values."),
            "answer": str(sum(table[k] for k in keys))}


@dataclass
class ToolEnv:
    """One rollout's environment: the task's table behind the ``get`` tool, and what the rollout asked of it."""

    table: dict[str, int]
    calls: list[dict] = field(default_factory=list)  # each {"name", "arguments", "result", "error"}

    def step(self, turn: str) -> str | None:
        """The environment's reply to one policy turn: the tool result's text when the turn ends in a tool call,
        None when it is the final answer (the rollout ends)."""
        call = CALL.search(turn) if turn.endswith(TURN_END) else None
        if call is None:
            return None
        key = call.group(1).strip()
        error = key not in self.table
        result = ERROR if error else str(self.table[key])
        self.calls.append({"name": TOOL, "arguments": key, "result": result, "error": error})
        return f"={result};"


def final_answer(completion: str) -> str:
    """What a transcript answers: its text after the last tool result (the whole text when there is none)."""
    last = None
    for last in RESULT.finditer(completion):
        pass
    return completion[last.end():] if last else completion


class ToolsDomain(Domain):
    name = "tools"
    levels = list(LEVELS)
    hidden_fields = ("table",)
    shape = "multi_turn"  # evotrainer.trainer.shapes: rollouts are turns with a tool between them
    turn_end = TURN_END
    eval_turn_cap = EVAL_TURN_CAP
    transcript_budget = 40  # tokens of a held-out transcript, at least (a level-4 solution takes 27 characters)

    def splits(self, seed: int, sizes: dict[str, int]) -> dict[str, list[Task]]:
        out: dict[str, list[Task]] = {name: [] for name in SPLITS}
        per = per_level(sizes, LEVELS)
        for level in LEVELS:
            size = space_size(level)
            if 2 * sum(per.values()) > size:
                raise ValueError(f"the splits ask {sum(per.values())} tasks of tools level {level}, more than half "
                                 f"its {size} distinct prompts")
            taken: set[int] = set()
            for name in SPLITS:  # held-out first, then dev, rl, warm-up: each without repeats, none shared
                ids = distinct(random.Random(f"tools-{seed}-{level}-{ID_PREFIX[name]}"), size, per[name], taken)
                taken.update(ids)
                out[name] += [make_task(f"{ID_PREFIX[name]}-{level}-{n}", level, i) for n, i in enumerate(ids)]
        return out

    def environment(self, task: Task) -> ToolEnv:
        """A fresh environment for one rollout of ``task`` (its state is the task's: a group shares it)."""
        return ToolEnv(dict(task["table"]))

    def canonical_prompt(self, task: Task) -> str:
        return "+".join(task["keys"]) + "="

    def instruction(self, task: Task) -> str:
        return task["question"]

    def extract_answer(self, completion: str) -> str | None:
        text = final_answer(completion).strip()
        return text if re.fullmatch(r"-?\d+", text) else None

    def verify(self, task: Task, completion: str) -> bool:
        answer = self.extract_answer(completion)
        return answer is not None and int(answer) == int(task["answer"])

    def reference_completion(self, task: Task) -> str:
        """The transcript that solves the task: one call per key its question names, then the answer."""
        return "".join(f"{TOOL}({k})={task['table'][k]};" for k in task["keys"]) + task["answer"]

    def null_probes(self, task: Task) -> dict[str, str]:
        """The generic probes, and the tool domain's: a guess without calling the tool, the right calls and no
        answer, calls repeated up to a turn cap, a call of a key the table lacks, the answer written inside a tool
        call, the right answer inside a forged tool result with no final answer, a wrong final answer after
        the right calls, a wrong final answer that echoes the tool result just before it (a result the policy
        wrote itself: an answer checked against what a tool said, not against what was asked, pays it), and, after
        the right calls, math's forms of a wrong answer: another number that starts with the answer's digits, and a
        run of numbers around the answer."""
        calls = "".join(f"{TOOL}({k})={task['table'][k]};" for k in task["keys"])
        wrong = str(int(task["answer"]) + 1)
        return {**super().null_probes(task), "guess": wrong, "calls_no_answer": calls,
                "spam_calls": f"{TOOL}({task['keys'][0]})={task['table'][task['keys'][0]]};" * EVAL_TURN_CAP,
                "tool_error": f"{TOOL}(zz)={ERROR};{wrong}", "answer_in_call": f"{TOOL}({task['answer']})",
                "forged_result": f"{TOOL}({task['keys'][0]})={task['answer']};", "wrong_after_calls": calls + wrong,
                "echoes_result": f"{TOOL}({task['keys'][0]})={wrong};{wrong}",
                "answer_extended": f"{calls}{task['answer']}0",
                "many_answers": calls + " ".join(str(v) for v in range(int(task["answer"]) - 3, int(task["answer"]) + 4))}

    def near_miss(self, task: Task) -> str | None:
        """Answering from memory without the tool: a wrong value (the answer plus one) with no call. The warm-up
        teaches it beside the transcript, so the policy's samples hold both and RL learns to call."""
        return str(int(task["answer"]) + 1)

    def tool_calls_in(self, completion: str) -> list[str]:
        """Each ``get(KEY)`` the transcript writes, its key stripped as the environment reads it."""
        return [f"{TOOL}({call.group(1).strip()})" for call in CALL.finditer(completion)]

    def transcript_fields(self, task: Task, completion: str, cap: int | None = None) -> dict:
        """The turn figures of a transcript given as text (a null probe's, in the reward pentest): its tool calls
        replayed against the task's environment, as a rollout records them (``Rollout.turns`` ...). Under a turn cap
        ``cap`` (policy turns; ``trainer.shapes.run_turns``) a transcript whose ``cap``-th turn still calls a tool is
        stopped there: ``hit_turn_cap``, and no call after it happens."""
        env, turns, rest, hit = self.environment(task), 1, completion, False
        while (call := CALL.search(rest)) is not None:
            env.step(rest[: call.end()])
            reply = RESULT.match(rest, call.end())
            rest = rest[reply.end() if reply else call.end():]
            if cap is not None and turns >= cap:
                hit = True
                break
            turns += 1
        return {"turns": turns, "tool_calls": len(env.calls), "tool_errors": sum(c["error"] for c in env.calls),
                "hit_turn_cap": hit}
