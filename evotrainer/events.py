"""The audit trail: ``RUN_DIR/events.jsonl``, one JSON object per line, append-only.

Every node start and end, every agent call (role, model, tokens, cost, seconds), every decision (diagnosis
confirmed, candidate made, verdict, promotion) lands here with a UTC timestamp. Lines are written with a single
``write`` on a file opened in append mode, so concurrent writers (run process and trainer service) never
interleave within a line, and a kill loses at most the line being written.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterator


class EventLog:
    def __init__(self, path: Path):
        self.path = Path(path)

    def emit(self, kind: str, **fields: Any) -> dict:
        event = {"ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "t": round(time.time(), 3),
                 "pid": os.getpid(), "kind": kind, **fields}
        line = json.dumps(event, default=str) + "\n"
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line)
        return event

    def read(self, kind: str | None = None) -> Iterator[dict]:
        if not self.path.exists():
            return
        with open(self.path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:  # a line cut by a kill
                    continue
                if kind is None or event.get("kind") == kind:
                    yield event
