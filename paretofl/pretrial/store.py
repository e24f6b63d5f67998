"""The results store: one SQLite file, one row per finished run.

A run is a (σ, T, q, seed) of one pre-trial spec; its row holds the
configuration, the metrics and both privacy figures.  Rows of one training
job are written in one transaction, so a sweep killed at any instant leaves
either all of a job's rows or none of them (SQLite's journal rolls back a
half-written transaction when the file is next opened), and re-running the
spec skips what is already there.  Primary key (σ, T, q, seed): a run can
never appear twice.

No torch here: ``paretofl fit`` and ``paretofl plot`` read the store fast.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

FORMAT = "paretofl-results-1"

COLUMNS = ("sigma", "rounds", "q", "seed", "test_loss", "accuracy", "epsilon", "epsilon_asymptotic", "seconds")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    sigma REAL NOT NULL, rounds INTEGER NOT NULL, q REAL NOT NULL, seed INTEGER NOT NULL,
    test_loss REAL NOT NULL, accuracy REAL NOT NULL,
    epsilon REAL NOT NULL, epsilon_asymptotic REAL NOT NULL, seconds REAL NOT NULL,
    PRIMARY KEY (sigma, rounds, q, seed)
);
CREATE TABLE IF NOT EXISTS claims (
    sigma REAL NOT NULL, q REAL NOT NULL, seed INTEGER NOT NULL,
    host TEXT NOT NULL, pid INTEGER NOT NULL, since REAL NOT NULL,
    PRIMARY KEY (sigma, q, seed)
);
CREATE TABLE IF NOT EXISTS spend (
    q REAL NOT NULL, sigma REAL NOT NULL, seed INTEGER NOT NULL, rounds INTEGER NOT NULL, since REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS local_work (
    epochs INTEGER NOT NULL, rounds INTEGER NOT NULL, seed INTEGER NOT NULL, q REAL NOT NULL,
    test_loss REAL NOT NULL, accuracy REAL NOT NULL,
    PRIMARY KEY (epochs, rounds, seed, q)
);
CREATE TABLE IF NOT EXISTS local_work_lr (
    epochs INTEGER NOT NULL, lr REAL NOT NULL, rounds INTEGER NOT NULL, seed INTEGER NOT NULL, q REAL NOT NULL,
    test_loss REAL NOT NULL, accuracy REAL NOT NULL,
    PRIMARY KEY (epochs, lr, rounds, seed, q)
);
"""

#: a local-work run (issue 46): noise-free, at ``epochs`` local epochs, evaluated at ``rounds``
LOCAL_WORK_COLUMNS = ("epochs", "rounds", "seed", "q", "test_loss", "accuracy")
#: the local work at a learning rate other than the pre-trial's own (``local_lrs`` in its spec): its own table, so
#: that the runs at the pre-trial's η stay where every store before keeps them (their η is the base's ``lr``)
LOCAL_WORK_LR_COLUMNS = ("epochs", "lr", "rounds", "seed", "q", "test_loss", "accuracy")

#: how a private store's runs draw their noise (written at its creation): from the operating system's entropy.
#: A private store without it was written before paretofl 0.3, when runs sharing a seed shared their noise
NOISE = "entropy"


def run_key(sigma, rounds, q, seed):
    """Grid values as stored (floats rounded so that 0.1 from TOML and from
    Python name the same configuration)."""
    return (round(float(sigma), 12), int(rounds), round(float(q), 12), int(seed))


def _loss(x) -> float:
    """A diverged run's loss (NaN) is stored as +inf: infinitely bad, and
    SQLite would otherwise turn NaN into NULL."""
    x = float(x)
    return math.inf if math.isnan(x) else x


#: the processes writing to a store (issue 45): a sweep registers here in the
#: step that creates or checks the store, and leaves when it closes it.  An
#: empty store takes a new spec only when no other live sweep is writing to it
_WRITERS = """
CREATE TABLE IF NOT EXISTS writers (host TEXT NOT NULL, pid INTEGER NOT NULL, since REAL NOT NULL,
                                    PRIMARY KEY (host, pid))
"""


class StoreChanged(ValueError):
    """The store a sweep writes to was replaced, removed or changed under it."""


def _guarded(method):
    """A write to the store, in the sweep's words: SQLite's errors (a table
    dropped, the file gone) and a changed identity end it in one line, with
    the transaction rolled back (nothing written under the wrong metadata)."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except sqlite3.DatabaseError as exc:
            if self.db.in_transaction:
                self.db.rollback()
            if "locked" in str(exc) or "busy" in str(exc):
                raise ValueError(f"the store {self.path} stayed locked by another process for 30 s; nothing more "
                                 "was written") from None
            raise self._gone("changed", str(exc)) from None
        except BaseException:
            if self.db.in_transaction:
                self.db.rollback()
            raise
    return wrapper


def _alive(pid: int) -> bool:
    """Is process ``pid`` running on this host?"""
    import os

    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    return True


class Store:
    """Open (or create) a results file for a spec's base settings.

    ``base`` (a dict: data, model, training settings — everything but the
    grid) is recorded on creation; opening the file with a different base is
    refused, so runs of different experiments never mix.  ``base=None`` opens
    an existing file to read, whatever its base (fit, plot).
    """

    def __init__(self, path, base: dict | None = None, classes: int | None = None):
        self.path = Path(path)
        if base is None and self.path.is_dir():
            raise ValueError(f"results file {self.path} is a folder, not a results store (.sqlite)")
        if base is None and not self.path.is_file():
            raise ValueError(f"results file {self.path} does not exist")
        if base is not None and not self.path.parent.exists():
            raise ValueError(f"cannot create {self.path}: folder {self.path.parent} does not exist")
        self._creating, self._inode = False, None
        try:
            # opened read-write even to read: a journal left by a killed
            # writer is rolled back here, never misread
            self.db = sqlite3.connect(self.path, timeout=30)
            if base is not None:
                self.db.execute("PRAGMA synchronous=FULL")
                # the schema, the identity check (and an empty store's new
                # spec) and this sweep's registration are one exclusive step:
                # two sweeps started together see each other, whatever the timing
                self.db.execute("BEGIN IMMEDIATE")
                self._creating = True
                for statement in (*_SCHEMA.split(";"), _WRITERS):
                    if statement.strip():
                        self.db.execute(statement)
            self._check(base)
            if classes is not None and "classes" not in self.meta:   # what chance is, for the fit's checks
                with self._step():
                    self.db.execute("INSERT INTO meta VALUES ('classes', ?)", (str(int(classes)),))
                self.meta["classes"] = str(int(classes))
            if base is not None:
                self._register()
                self.db.commit()
                self._creating = False
                st = os.stat(self.path)
                self._inode = (st.st_dev, st.st_ino)
        except sqlite3.DatabaseError as exc:
            self._abandon()
            raise ValueError(f"{self.path} is not a paretofl results file ({exc})") from None
        except BaseException:
            self._abandon()
            raise

    def _abandon(self):
        db = getattr(self, "db", None)
        if db is not None:
            if db.in_transaction:
                db.rollback()
            db.close()
        self._creating = False

    @contextmanager
    def _step(self):
        """``with self.db`` (a transaction of its own), or nothing inside the
        opening's exclusive step, which commits once at its end."""
        if self._creating:
            yield
        else:
            with self.db:
                yield

    def _others_writing(self) -> list:
        """(host, pid) of the other live sweeps registered on this store."""
        import socket

        me = (socket.gethostname(), os.getpid())
        rows = self.db.execute("SELECT host, pid FROM writers").fetchall()
        return [(h, p) for h, p in rows if (h, p) != me and (h != me[0] or _alive(p))]

    def _register(self):
        import socket

        host = socket.gethostname()
        dead = [(h, p) for h, p in self.db.execute("SELECT host, pid FROM writers") if h == host and not _alive(p)]
        self.db.executemany("DELETE FROM writers WHERE host = ? AND pid = ?", dead)
        self.db.execute("INSERT OR REPLACE INTO writers VALUES (?, ?, ?)", (host, os.getpid(), time.time()))

    def _gone(self, how: str, why: str = "") -> StoreChanged:
        return StoreChanged(f"the store {self.path} was {how} under this sweep{f' ({why})' if why else ''}; nothing "
                            "more was written to it")

    def _still_mine(self):
        """Inside a write's transaction: is the file at the path still the
        store this sweep opened (the same file, the same format and base)?"""
        if self._inode is None:
            return
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise self._gone("removed") from None
        if (st.st_dev, st.st_ino) != self._inode:
            raise self._gone("replaced", "another file is there now")
        meta = dict(self.db.execute("SELECT key, value FROM meta"))
        try:
            base = json.loads(meta.get("base", "null"))
        except ValueError:
            base = None
        if meta.get("format") != FORMAT or base != self.base:
            raise self._gone("changed", "its spec is not this sweep's")

    def _check(self, base):
        tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not {"meta", "runs"} <= tables:
            if not tables and base is None:
                raise ValueError(f"{self.path} is not a paretofl results file (it is empty)")
            raise ValueError(f"{self.path} is not a paretofl results file (no runs table)")
        meta = dict(self.db.execute("SELECT key, value FROM meta"))
        if not meta and base is not None:
            with self._step():
                self.db.execute("INSERT INTO meta VALUES ('format', ?)", (FORMAT,))
                self.db.execute("INSERT INTO meta VALUES ('base', ?)", (json.dumps(base, sort_keys=True),))
                if base.get("private"):   # a private store's spend log starts empty, its noise from the OS
                    self.db.execute("INSERT INTO meta VALUES ('noise', ?)", (NOISE,))
                    self.db.execute("INSERT INTO meta VALUES ('spend_rows', '0')")
            meta = dict(self.db.execute("SELECT key, value FROM meta"))
        if not meta and base is None:   # tables but no meta yet: a writer between its schema and its first commit
            raise ValueError(f"{self.path} is not a paretofl results file (it is empty)")
        self.meta = meta
        if meta.get("format") != FORMAT:
            raise ValueError(f"{self.path} is not a paretofl results file (format {meta.get('format')!r})")
        try:
            self.base = json.loads(meta["base"])
        except (KeyError, ValueError):
            raise ValueError(f"{self.path} is a damaged paretofl results file (no readable base)") from None
        others = self._others_writing() if base is not None else []
        if base is not None and self.base != json.loads(json.dumps(base, sort_keys=True)) and len(self) == 0 \
                and not others:
            # an empty store (a run that failed before training anything) takes the new spec
            with self._step():
                self.db.execute("UPDATE meta SET value = ? WHERE key = 'base'", (json.dumps(base, sort_keys=True),))
            self.base = json.loads(json.dumps(base, sort_keys=True))
        if base is not None and self.base != json.loads(json.dumps(base, sort_keys=True)):
            diff = sorted(k for k in set(base) | set(self.base) if base.get(k) != self.base.get(k))
            if others and len(self) == 0:
                raise ValueError(f"another sweep (process {others[0][1]} on {others[0][0]}) is writing runs of a "
                                 f"different spec to {self.path} (differs in {', '.join(diff)}); wait for it to "
                                 "finish, or write to another results file")
            raise ValueError(f"{self.path} holds runs of a different spec (differs in {', '.join(diff)}); "
                             "write to another results file"
                             + ("; its runs were scored on the data set's test split (as every store made before "
                                "pre-trials scored on held-out samples was): give scored_on test to add to it as it "
                                "was" if diff == ["scored_on"] and "scored_on" not in self.base else ""))

    # ------------------------------------------------------------------ writing
    @_guarded
    def add_rows(self, rows: list[dict], release=()):
        """Write one job's rows atomically (and release the claims
        ``release`` lists, in the same transaction); a row already present is
        kept (runs are deterministic per seed, so it would be the same)."""
        vals = [(*run_key(r["sigma"], r["rounds"], r["q"], r["seed"]), _loss(r["test_loss"]), float(r["accuracy"]),
                 float(r["epsilon"]), float(r["epsilon_asymptotic"]), float(r["seconds"])) for r in rows]
        self.db.execute("BEGIN IMMEDIATE")
        with self.db:
            self._still_mine()      # in the write's own transaction: never rows under another store's spec
            self.db.executemany(f"INSERT INTO runs ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))}) "
                                "ON CONFLICT (sigma, rounds, q, seed) DO NOTHING", vals)
            if release:
                self._release(release)

    def add_job(self, rows: list[dict], replicas, q):
        """A finished job's rows and the release of its claims, in one transaction."""
        self.add_rows(rows, release=[(sg, q, sd) for sg, sd in replicas])

    # ------------------------------------------------------------------ claims
    @_guarded
    def claim(self, q, replicas, rounds=()) -> tuple[list, int]:
        """Claim the (σ, seed) replicas of a job at rate q for this process.
        Returns (the replicas it got, how many another process holds).  A
        replica whose runs at ``rounds`` are all stored already (another
        process finished them) is neither claimed nor counted; a claim held
        by a process no longer running on this host is taken over (a killed
        sweep's claims); claims of live processes, or of other hosts, are
        left to them."""
        import os
        import socket

        host, pid = socket.gethostname(), os.getpid()
        got, held = [], 0
        # BEGIN IMMEDIATE takes the write lock before the first read: the
        # checks below and the claim are one step for every other process
        # (Python's sqlite3 would otherwise read outside the transaction, and
        # two processes could both find a replica free, or one could find it
        # unfinished just before another stored it, and train it again)
        self.db.execute("BEGIN IMMEDIATE")
        with self.db:
            self._still_mine()
            for sg, sd in replicas:
                key = (round(float(sg), 12), round(float(q), 12), int(sd))
                if rounds:
                    n = self.db.execute("SELECT COUNT(*) FROM runs WHERE sigma = ? AND q = ? AND seed = ? AND "
                                        f"rounds IN ({', '.join('?' * len(rounds))})",
                                        (*key, *[int(t) for t in rounds])).fetchone()[0]
                    if n == len(set(rounds)):
                        continue
                row = self.db.execute("SELECT host, pid FROM claims WHERE sigma = ? AND q = ? AND seed = ?",
                                      key).fetchone()
                if row is not None and not (row[0] == host and (row[1] == pid or not _alive(row[1]))):
                    held += 1
                    continue
                self.db.execute("INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?, ?, ?)",
                                (*key, host, pid, time.time()))
                got.append((sg, sd))
            if got and self.private:
                # a private run is charged when it is claimed, in the same
                # step: whatever it releases later, and however it ends
                self._log_spend(q, got, max(int(t) for t in rounds) if rounds else 0)
        return got, held

    # ------------------------------------------------------------------ spend (a private pre-trial)
    @property
    def private(self) -> bool:
        """Does this store hold a private pre-trial (runs on the clients' own data, every one charged)?"""
        return bool(self.base.get("private", False))

    def record_spend(self, q, replicas, rounds: int):
        """Charge the (σ, seed) replicas at rate q for ``rounds`` rounds each
        in the spend log (what :meth:`claim` does for a private sweep)."""
        self.db.execute("BEGIN IMMEDIATE")
        with self.db:
            self._log_spend(q, replicas, rounds)

    def _log_spend(self, q, replicas, rounds: int):
        if int(rounds) < 1:
            raise ValueError("a private run is charged for at least one round")
        now = time.time()
        self.db.executemany("INSERT INTO spend VALUES (?, ?, ?, ?, ?)",
                            [(round(float(q), 12), round(float(sg), 12), int(sd), int(rounds), now)
                             for sg, sd in replicas])
        self.db.execute("UPDATE meta SET value = CAST(CAST(value AS INTEGER) + ? AS TEXT) WHERE key = 'spend_rows'",
                        (len(replicas),))

    def spend(self) -> list[tuple]:
        """A private store's spend log, checked against its runs: one
        (q, σ, seed, rounds) per run charged (a run trained again after an
        interruption is charged again: its noise is new).  Refused, in one
        line, where the log cannot be believed: a store written before the
        log (its runs shared their noise), a log whose length is not the one
        recorded beside it, or a stored run that no logged run covers."""
        if not self.private:
            return []
        where = f"{self.path} (a private pre-trial)"
        if self.meta.get("noise") != NOISE or "spend_rows" not in self.meta:
            raise ValueError(f"{where} was written before paretofl 0.3: its runs at one seed shared their noise, so "
                             "together they give back the clients' noiseless updates and its epsilon is unbounded; "
                             "run the pre-trial again (CHANGELOG 0.3.0)")
        log = self.db.execute("SELECT q, sigma, seed, rounds FROM spend").fetchall()
        recorded = self.db.execute("SELECT value FROM meta WHERE key = 'spend_rows'").fetchone()
        if recorded is None or str(len(log)) != recorded[0]:
            raise ValueError(f"{where}: its spend log holds {len(log)} runs where {recorded and recorded[0]} were "
                             "charged: it was changed, and what the pre-trial spent cannot be re-derived")
        most = {}
        for q, sg, sd, t in log:
            key = (round(q, 12), round(sg, 12), int(sd))
            most[key] = max(most.get(key, 0), int(t))
        for sg, t, q, sd in self.db.execute("SELECT sigma, rounds, q, seed FROM runs"):
            if most.get((round(q, 12), round(sg, 12), int(sd)), 0) < int(t):
                raise ValueError(f"{where}: its run sigma={sg:g}, T={int(t)}, q={q:g}, seed={int(sd)} was never "
                                 "charged in its spend log: the log was changed, and what the pre-trial spent "
                                 "cannot be re-derived")
        return [(float(q), float(sg), int(sd), int(t)) for q, sg, sd, t in log]

    def uncharged_gaps(self) -> int:
        """How many charged runs have no stored row at all (deleted, or a
        sweep interrupted before its first evaluation): they stay charged."""
        log = {(round(q, 12), round(sg, 12), int(sd)) for q, sg, sd, _ in self.spend()}
        rows = {(round(q, 12), round(sg, 12), int(sd))
                for q, sg, sd in self.db.execute("SELECT q, sigma, seed FROM runs")}
        return len(log - rows)

    def release(self, q, replicas):
        """Give the claims back; nothing is done to a store replaced,
        removed or changed under this sweep (its claims are not ours)."""
        try:
            self.db.execute("BEGIN IMMEDIATE")
            with self.db:
                self._still_mine()
                self._release([(sg, q, sd) for sg, sd in replicas])
        except (StoreChanged, sqlite3.DatabaseError):
            if self.db.in_transaction:
                self.db.rollback()

    def _release(self, keys):
        self.db.executemany("DELETE FROM claims WHERE sigma = ? AND q = ? AND seed = ?",
                            [(round(float(sg), 12), round(float(q), 12), int(sd)) for sg, q, sd in keys])

    # ------------------------------------------------------------------ local work (public stores)
    @_guarded
    def add_local_work(self, rows: list[dict]):
        """Store noise-free local-work runs (one row per epochs, T, seed, and
        learning rate where a row names one other than the store's own), atomically."""
        if self.private:
            raise ValueError(f"{self.path} holds a private pre-trial: local work is measured without noise, on "
                             "public data only")
        own = self._own_lr()
        vals = [(int(r["epochs"]), int(r["rounds"]), int(r["seed"]), round(float(r["q"]), 12), _loss(r["test_loss"]),
                 float(r["accuracy"])) for r in rows if round(float(r.get("lr", own)), 12) == own]
        other = [(int(r["epochs"]), round(float(r["lr"]), 12), int(r["rounds"]), int(r["seed"]),
                  round(float(r["q"]), 12), _loss(r["test_loss"]), float(r["accuracy"]))
                 for r in rows if round(float(r.get("lr", own)), 12) != own]
        self.db.execute("BEGIN IMMEDIATE")
        with self.db:
            self._still_mine()
            self.db.executemany("INSERT INTO local_work VALUES (?, ?, ?, ?, ?, ?) "
                                "ON CONFLICT (epochs, rounds, seed, q) DO NOTHING", vals)
            self.db.executemany("INSERT INTO local_work_lr VALUES (?, ?, ?, ?, ?, ?, ?) "
                                "ON CONFLICT (epochs, lr, rounds, seed, q) DO NOTHING", other)

    def _own_lr(self) -> float:
        """The pre-trial's own learning rate (its base's), as the local work's rows are keyed."""
        return round(float(self.base.get("lr", 0.1)), 12)

    @_guarded
    def set_meta(self, key: str, value: str):
        """Record ``key`` (e.g. the partition's dissimilarity) beside the runs."""
        self.db.execute("BEGIN IMMEDIATE")
        with self.db:
            self._still_mine()
            self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, str(value)))
        self.meta[key] = str(value)

    def local_work_done(self, q: float) -> set:
        """Keys (epochs, η, T, seed) of the stored local-work runs at rate ``q``."""
        q, own = round(float(q), 12), self._own_lr()
        out = set()
        if self._has_local_work():
            rows = self.db.execute("SELECT epochs, rounds, seed FROM local_work WHERE q = ?", (q,))
            out |= {(int(e), own, int(t), int(sd)) for e, t, sd in rows}
        if self._has_local_work("local_work_lr"):
            rows = self.db.execute("SELECT epochs, lr, rounds, seed FROM local_work_lr WHERE q = ?", (q,))
            out |= {(int(e), round(float(lr), 12), int(t), int(sd)) for e, lr, t, sd in rows}
        return out

    def local_work_count(self) -> int:
        return sum(self.db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                   for t in ("local_work", "local_work_lr") if self._has_local_work(t))

    def _has_local_work(self, table: str = "local_work") -> bool:
        """A store written before issue 46 (or, for ``local_work_lr``, before η was measured), opened to read,
        has no such table."""
        return self.db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
                               ).fetchone() is not None

    def local_work_table(self) -> dict:
        """The local-work rows as numpy columns (sorted by η, epochs, T, seed), with each row's learning rate
        (``lr``: the base's for the runs at the pre-trial's own)."""
        own = self._own_lr()
        rows = [(e, own, t, sd, q, loss, acc) for e, t, sd, q, loss, acc in self.db.execute(
            f"SELECT {', '.join(LOCAL_WORK_COLUMNS)} FROM local_work")] if self._has_local_work() else []
        if self._has_local_work("local_work_lr"):
            rows += self.db.execute(f"SELECT {', '.join(LOCAL_WORK_LR_COLUMNS)} FROM local_work_lr").fetchall()
        rows.sort(key=lambda r: (r[1], r[0], r[2], r[3], r[4]))
        arr = np.array(rows, dtype=float).reshape(len(rows), len(LOCAL_WORK_LR_COLUMNS))
        return {c: arr[:, j] for j, c in enumerate(LOCAL_WORK_LR_COLUMNS)}

    # ------------------------------------------------------------------ reading
    def done(self) -> set:
        """Keys (σ, T, q, seed) of the finished runs."""
        return {run_key(*r) for r in self.db.execute("SELECT sigma, rounds, q, seed FROM runs")}

    def table(self) -> dict:
        """All rows as numpy columns (sorted by q, σ, T, seed)."""
        rows = self.db.execute(f"SELECT {', '.join(COLUMNS)} FROM runs ORDER BY q, sigma, rounds, seed").fetchall()
        arr = np.array(rows, dtype=float).reshape(len(rows), len(COLUMNS))
        return {c: arr[:, j] for j, c in enumerate(COLUMNS)}

    @property
    def classes(self) -> int | None:
        """How many classes the pre-trial's data have (None in stores written before it was recorded)."""
        v = self.meta.get("classes")
        return int(v) if v is not None else None

    def __len__(self):
        return self.db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]

    def close(self):
        if self._inode is not None:      # this sweep leaves the writers (not of a store no longer its own)
            self.release_writer()
        self.db.close()

    def release_writer(self):
        import socket

        try:
            self.db.execute("BEGIN IMMEDIATE")
            with self.db:
                self._still_mine()
                self.db.execute("DELETE FROM writers WHERE host = ? AND pid = ?", (socket.gethostname(), os.getpid()))
        except (StoreChanged, sqlite3.DatabaseError):
            if self.db.in_transaction:
                self.db.rollback()
        self._inode = None


def read_base(path) -> dict:
    """An existing store's base: the spec its runs were made with (and the
    fingerprints it adds beside it)."""
    st = Store(path)
    try:
        return dict(st.base)
    finally:
        st.close()


def read_table(path) -> dict:
    """Every row of an existing store as numpy columns (see :meth:`Store.table`)."""
    st = Store(path)
    try:
        return st.table()
    finally:
        st.close()
