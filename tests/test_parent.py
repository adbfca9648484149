"""A process that watches its parent (the trainer service watching the run, a rank watching the service) exits
when that parent is gone, and not before."""

from __future__ import annotations

import subprocess
import sys
import time


def test_a_watcher_exits_when_the_watched_process_ends_and_not_before() -> None:
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    child = subprocess.Popen([sys.executable, "-c", "import time; from evotrainer.trainer.parent import die_with; "
                              f"die_with({parent.pid}); time.sleep(60); raise SystemExit(3)"])
    try:
        time.sleep(2.0)
        assert child.poll() is None  # the parent lives: the watcher waits
        parent.kill()
        parent.wait()
        assert child.wait(timeout=10) == 0  # gone: the watcher exits the process (0, not the sleep's 3)
    finally:
        for p in (parent, child):
            p.kill()
