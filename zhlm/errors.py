"""The one error type for failures a user can fix: bad input, bad flags, a refusal.

Why a type of its own: the programs print such an error as one line naming what to do next and
exit non-zero, while anything else (a bug in zhlm or a library) keeps its traceback, so an
internal error never reads as a user's mistake. It subclasses ``ValueError`` so that callers of
the library who catch that keep working.
"""


class UserError(ValueError):
    """A failure the user can fix; its message says what to do next, in one line."""


class NotFound(UserError, FileNotFoundError):
    """A file or folder the user named is not there, or is not what it should be; its message
    names the path. Also a ``FileNotFoundError``, for callers that catch that."""
