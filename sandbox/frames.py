"""Column frames: how a list of rows (dicts) crosses the sandbox's JSON-lines protocol without repeating itself.

A replay sends every rollout to the sandbox (and its task, and each group of rollouts again to the filters),
and gets a dict of reward components back per rollout. As plain JSON that is mostly repeated keys and repeated
task dicts: 100k rollouts were 19 MB for ``score`` and 37 MB for ``filter``, and encoding, decoding and
rebuilding them cost ten times what the harness code itself took. A frame sends each key once and each value
column as one list; a column of dicts that are the same objects (the task of every rollout of a task) is sent
once per distinct object plus an index per row; a column of dicts with the same keys (reward components) is a
frame itself. Decoded, the rows are equal to the ones sent, and rows that shared a dict share it again.

    encode(rows)                  {"frame": {"n", "cols", "shared"}}      rows: a list of dicts
    encode(groups, grouped=True)  the same plus "sizes"                   groups: a list of lists of dicts
    decode(value)                 rows (or groups) again; ValueError for anything that is not a well-formed frame
    gc_paused()                   the cyclic GC paused around a large encode or decode

Standard library only: ``runner.py`` loads this file by path inside the sandbox (requests in, results out) and
the worker imports it (requests out, results in; what the sandbox sends back is untrusted, so :func:`decode`
checks every shape). Try it alone: ``python -m sandbox.frames`` (a round trip and the sizes).
"""

from __future__ import annotations

import contextlib
import gc
from itertools import repeat
from operator import itemgetter
from typing import Any

_MAX_DEPTH = 3  # frames inside frames (rows -> reward_components -> ...)


@contextlib.contextmanager
def gc_paused():
    """Pause the cyclic garbage collector while the block encodes or decodes rows: it creates no cycles, and
    every collection it would trigger scans the whole heap again (half the cost of a large decode)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _column(values: list, depth: int) -> tuple[Any, Any]:
    """(column as sent, shared objects or None) for one key's values (C-level loops: this runs per row)."""
    if not values or set(map(type, values)) != {dict}:
        return values, None
    ids = list(map(id, values))
    objects = dict(zip(ids, values))
    if len(objects) < len(values):  # the same dicts again and again (a task per rollout): send each once
        position = {key: n for n, key in enumerate(objects)}
        return list(map(position.__getitem__, ids)), list(objects.values())
    if depth < _MAX_DEPTH:
        nested = _frame(values, depth + 1)
        if nested is not None:
            return nested, None
    return values, None


def _frame(rows: list[dict], depth: int) -> dict | None:
    """Rows with the same keys as one frame; None when their keys differ."""
    keys = list(rows[0])
    if set(map(len, rows)) != {len(keys)}:
        return None
    cols, shared = {}, {}
    try:
        for key in keys:
            cols[key], uniques = _column(list(map(itemgetter(key), rows)), depth)
            if uniques is not None:
                shared[key] = uniques
    except KeyError:
        return None
    return {"frame": {"n": len(rows), "cols": cols, "shared": shared}}


def encode(rows: list, grouped: bool = False) -> Any:
    """``rows`` (a list of dicts, or with ``grouped`` a list of lists of dicts) as a frame when every row has
    the same keys; else unchanged (sent as plain JSON)."""
    flat = [row for group in rows for row in group] if grouped else rows
    if not flat or set(map(type, flat)) != {dict}:
        return rows
    with gc_paused():
        out = _frame(flat, 0)
    if out is None:
        return rows
    if grouped:
        out["sizes"] = list(map(len, rows))
    return out


def _rows(frame: Any, depth: int) -> list[dict]:
    if type(frame) is not dict or set(frame) != {"n", "cols", "shared"} or depth > _MAX_DEPTH:
        raise ValueError("not a frame")
    n, cols, shared = frame["n"], frame["cols"], frame["shared"]
    if type(n) is not int or n < 0 or type(cols) is not dict or type(shared) is not dict:
        raise ValueError("a frame's n, cols or shared has the wrong type")
    columns = []
    for key, col in cols.items():
        if type(col) is dict and set(col) == {"frame"}:
            col = _rows(col["frame"], depth + 1)
        elif key in shared:
            uniques = shared[key]
            if type(uniques) is not list or type(col) is not list:
                raise ValueError(f"shared column {key!r} is not an index list and a value list")
            if set(map(type, col)) - {int}:
                raise ValueError(f"shared column {key!r} has an index that is not an integer")
            try:
                col = list(map(uniques.__getitem__, col))
            except IndexError:
                raise ValueError(f"shared column {key!r} has an index out of range") from None
        if type(col) is not list or len(col) != n:
            raise ValueError(f"column {key!r} does not hold {n} values")
        columns.append(col)
    if not columns:
        return [{} for _ in range(n)]
    return list(map(dict, map(zip, repeat(list(cols)), zip(*columns))))


def decode(value: Any) -> Any:
    """A frame (see :func:`encode`) back as rows or groups; any other value unchanged."""
    if type(value) is not dict or "frame" not in value:
        return value
    if not set(value) <= {"frame", "sizes"}:
        raise ValueError("a frame with unknown fields")
    with gc_paused():
        rows = _rows(value["frame"], 0)
    sizes = value.get("sizes")
    if sizes is None:
        return rows
    if type(sizes) is not list or set(map(type, sizes)) - {int} or min(sizes, default=0) < 0 \
            or sum(sizes) != len(rows):
        raise ValueError("a grouped frame's sizes do not add up to its rows")
    groups, start = [], 0
    for size in sizes:
        groups.append(rows[start:start + size])
        start += size
    return groups


if __name__ == "__main__":
    import json

    task = {"id": "t1", "answer": "9"}
    rows = [{"prompt": "4+5=", "completion": str(i % 10), "task": task, "components": {"correct": 1.0}}
            for i in range(1000)]
    framed = encode(rows)
    assert decode(json.loads(json.dumps(framed))) == rows
    print(f"plain {len(json.dumps(rows))} bytes, framed {len(json.dumps(framed))} bytes")
