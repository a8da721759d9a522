"""How a program ends on an expected failure or on Ctrl-C: one line on stderr, no traceback.

Why: a user who passes a bad file or flag, or finds the workdir busy, needs to read what to do
next, not a traceback; a bug in zhlm or in a library must keep its traceback, so that it never
reads as the user's mistake. Expected failures are :class:`zhlm.errors.UserError` (bad input,
bad flags, refusals); nothing else is caught. Ctrl-C (SIGINT) is expected too: the line says
what running the same command again does, and the exit status is a shell's for a program
SIGINT stopped.
"""

import contextlib
import sys

from zhlm.errors import UserError

INTERRUPTED = 130  # 128 + SIGINT


@contextlib.contextmanager
def one_line(program: str, interrupted: str = "; run the same command again", rewrite=str):
    """Runs the ``with`` block; a :class:`UserError` exits with status 1 and its message
    (``rewrite(error)``), Ctrl-C with :data:`INTERRUPTED` and ``program: interrupted`` followed
    by ``interrupted`` (what a rerun does), each one line after ``program:``."""
    try:
        yield
    except UserError as error:
        sys.exit(f"{program}: {rewrite(str(error))}")
    except KeyboardInterrupt:
        print(f"{program}: interrupted{interrupted}", file=sys.stderr, flush=True)
        sys.exit(INTERRUPTED)
