"""Writing a file so that a reader (or a kill) sees the old file or the new one, never half of one.

Every file a run rewrites in place (status, baseline, report, rollouts, the trainer's port and progress files, the
LLM spend, the skill store's generation) is written through here: to a temporary name beside it, unique to the
writing process, then renamed over it (``os.replace`` is atomic on one file system). Alone:
``python -c "from evotrainer.atomic import write_text; write_text('/tmp/x.txt', 'hi')"``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def replacing(path: Path | str) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write; on leaving the block it replaces ``path`` in one step (its
    folder is made when missing); on an exception it is removed and ``path`` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def write_text(path: Path | str, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically."""
    with replacing(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
