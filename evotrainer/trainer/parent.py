"""Die with a parent: a daemon thread that exits this process when a given process is gone (or a zombie).

The trainer service watches the ``evotrainer run`` that started it (``--parent-pid``), and every rank launched for
a phase watches the service, so a killed run never leaves a trainer or a rank behind. It is the framework's one
die-with-parent mechanism (the service is started with ``--parent-pid``, nothing else); the sandbox's own children
die by the kernel's PR_SET_PDEATHSIG in ``sandbox/processes.py`` instead, because they run untrusted code that could
stop a watcher thread and the sandbox package imports nothing of ``evotrainer``. Kept apart from the service so a
rank does not import the web stack to use it. Alone: ``python -c "from evotrainer.trainer.parent import
die_with; die_with(PID)"`` in a long-lived process exits it within half a second of PID's end.
"""

from __future__ import annotations

import os
import threading
import time

POLL_S = 0.5


def watch_parent(pid: int) -> None:
    """Exit this process (``os._exit(0)``) when ``pid`` is gone or a zombie; returns never."""
    import psutil

    while True:
        try:
            gone = psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            gone = True
        except psutil.Error:  # e.g. access denied: it exists
            gone = False
        if gone:
            os._exit(0)
        time.sleep(POLL_S)


def die_with(pid: int) -> None:
    """Start the watcher of ``pid`` in a daemon thread."""
    threading.Thread(target=watch_parent, args=(pid,), daemon=True, name=f"die-with-{pid}").start()
