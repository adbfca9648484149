"""How a procedural domain draws its four disjoint splits from each level's space of distinct prompts.

A level is a space of ``size`` distinct prompts, indexed 0..size-1 (``space_size(level)`` in each domain). The
held-out and dev splits are drawn first, without repeats and sharing nothing; the training pools (rl, warm-up) share
what is left, in proportion to their sizes when it is too little for both, and cycle when a small space cannot fill
them. Every draw is seeded by the domain's name, the run's seed, the level and the split, so a split never depends
on another split's size. Used by math and code (``level_splits``); tools draws all four without repeats
(``distinct``). Try it alone::

    python -c "from evotrainer.domains.draws import distinct; import random; \\
print(distinct(random.Random(0), 10, 3, {1, 2}))"
"""

from __future__ import annotations

import random
from collections.abc import Callable

from evotrainer.domains.base import ID_PREFIX, SPLITS, Task


def distinct(rng: random.Random, size: int, k: int, exclude: set[int]) -> list[int]:
    """``k`` distinct indices in range(size), none in ``exclude`` (k <= size - len(exclude))."""
    if 2 * k <= size - len(exclude):  # sparse: draw and reject, never materialising a large space
        out, seen = [], set(exclude)
        while len(out) < k:
            i = rng.randrange(size)
            if i not in seen:
                seen.add(i)
                out.append(i)
        return out
    rest = [i for i in range(size) if i not in exclude]
    rng.shuffle(rest)
    return rest[:k]


def per_level(sizes: dict[str, int], levels: list[str]) -> dict[str, int]:
    """Each split's tasks per level: its size over the levels, rounded up."""
    return {name: -(-max(0, sizes.get(name, 0)) // len(levels)) for name in SPLITS}


def level_splits(domain: str, seed: int, sizes: dict[str, int], levels: list[str], space_size: Callable[[str], int],
                 make_task: Callable[[str, str, int], Task]) -> dict[str, list[Task]]:
    """The four splits of ``domain``: held-out and dev without repeats (at most half of each level's space between
    them, else a ValueError naming the level), the training pools from what is left (see the module's docstring).
    ``make_task(task_id, level, index)`` builds the task at ``index`` of ``level``'s space."""
    out: dict[str, list[Task]] = {name: [] for name in SPLITS}
    per = per_level(sizes, levels)
    for level in levels:
        size = space_size(level)
        if 2 * (per["held_out"] + per["dev"]) > size:
            raise ValueError(f"training.eval_size and training.dev_size ask {per['held_out']} + {per['dev']} "
                             f"tasks of {domain} level {level}, more than half its {size} distinct prompts")
        taken: set[int] = set()
        drawn: dict[str, list[int]] = {}
        for name in ("held_out", "dev"):
            drawn[name] = distinct(random.Random(f"{domain}-{seed}-{level}-{ID_PREFIX[name]}"), size, per[name], taken)
            taken.update(drawn[name])
        left, want = size - len(taken), per["rl"] + per["warmup"]
        share = {"rl": min(per["rl"], left if want <= left else round(left * per["rl"] / want))}
        share["warmup"] = min(per["warmup"], left - share["rl"])
        for name in ("rl", "warmup"):
            if per[name] and not share[name]:
                raise ValueError(f"{domain} level {level} has no prompt left for the {name} split ({size} prompts)")
            ids = distinct(random.Random(f"{domain}-{seed}-{level}-{ID_PREFIX[name]}"), size, share[name], taken)
            taken.update(ids)
            drawn[name] = ids + [ids[n % len(ids)] for n in range(per[name] - len(ids))]  # a small space cycles
        for name in SPLITS:
            out[name] += [make_task(f"{ID_PREFIX[name]}-{level}-{n}", level, i) for n, i in enumerate(drawn[name])]
    return out
