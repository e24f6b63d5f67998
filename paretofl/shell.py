"""A path as the commands paretofl suggests print it (a ``next:`` line, a
refusal naming what to run): quoted for a POSIX shell where it needs to be,
and a relative path that starts with "-" led by "./", so that a command
pasted as printed reads it as a path, not as an option.  Nothing else of
paretofl: any layer may use it."""

from __future__ import annotations

import os
import shlex


def command_path(path) -> str:
    """``path`` as a shell command takes it whole."""
    p = os.fspath(path)
    if p.startswith("-"):
        p = "./" + p
    return shlex.quote(p)
