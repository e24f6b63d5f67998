"""One progress bar for every long command (issue 45): rounds, runs or
replica-rounds done and the time left, on stderr, drawn by tqdm.

A bar is drawn only when it is wanted (the CLI passes ``not --json``) and
its stream is a terminal: piped, redirected or under ``--json`` nothing is
written, as the ecosystem expects.  A step that takes long (one round of a
hundred thousand local epochs) still shows time moving: a heartbeat redraws
the bar, its elapsed time, every ``tick`` seconds between updates.

Every bar of paretofl comes from here: the trainer's rounds, the pre-trial's
replica-rounds, the tuning grid's rounds and the audit's runs.  No torch,
nothing else of paretofl: any layer may use it.
"""

from __future__ import annotations

import sys
import threading


def shown(wanted: bool, file=None) -> bool:
    """Is a bar drawn: ``wanted`` and ``file`` (default stderr) a terminal."""
    file = sys.stderr if file is None else file
    if not wanted or file is None:
        return False
    try:
        return bool(file.isatty())
    except (AttributeError, ValueError, OSError):   # closed, or not a stream
        return False


class Progress:
    """A tqdm bar of ``total`` ``unit``s, or nothing (see :func:`shown`).

    ``update(n)`` adds n done, ``note(**fields)`` sets the fields shown after
    the counts, ``close()`` (or leaving a ``with`` block) removes the bar.
    A heartbeat thread redraws it every ``tick`` seconds, so the elapsed time
    moves while a long step runs.
    """

    def __init__(self, total: int | None, desc: str, unit: str, wanted: bool = True, file=None,
                 tick: float = 1.0, leave: bool = False):
        self.bar = None
        self._stop = threading.Event()
        self._beat = None
        if not shown(wanted, file):
            return
        from tqdm import tqdm

        self.bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr if file is None else file, leave=leave,
                        smoothing=0.1, dynamic_ncols=True)
        if tick and tick > 0:
            self._beat = threading.Thread(target=self._heartbeat, args=(float(tick),), daemon=True,
                                          name="paretofl-progress")
            self._beat.start()

    @property
    def active(self) -> bool:
        return self.bar is not None

    def _heartbeat(self, tick: float):
        while not self._stop.wait(tick):
            bar = self.bar
            if bar is None:
                return
            try:
                bar.refresh()     # tqdm's own lock; the elapsed time is read now
            except Exception:     # noqa: BLE001 - a bar closed under the heartbeat
                return

    def update(self, n: int = 1):
        if self.bar is not None:
            self.bar.update(n)

    def note(self, **fields):
        if self.bar is not None:
            self.bar.set_postfix(**fields, refresh=False)

    def close(self):
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=5)
            self._beat = None
        if self.bar is not None:
            bar, self.bar = self.bar, None
            bar.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
