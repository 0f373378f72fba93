"""A forked process's life: it dies with its parent, and it ends with its body's exit code after
its logs and streams are flushed, never returning into the code that forked it (the fork
server's loop, a supervisor's). The fork server's jobs (sweep/child.py) and user code's workers
(core/isolate.py) are such processes."""

from __future__ import annotations

import os
import sys
from typing import Callable


def on_parent_death(signum: int) -> None:
    """Have the kernel send `signum` to this process when its parent dies (Linux's
    PR_SET_PDEATHSIG; it follows the parent's thread that forked this process)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signum)  # 1: PR_SET_PDEATHSIG


def run_then_exit(body: Callable[[], int | None]) -> None:
    """Run `body` and end the process with its code, as `python` would end on the same outcome:
    sys.exit's code (its message printed), 1 and the traceback for an exception."""
    code = 1
    try:
        code = body() or 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            import logging

            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
