"""The clients' local work in the bound (docs/theory.md §4.E; issue 46).

With K local epochs at learning rate η, the utility gap of (1.2) becomes

    ε_u(q, T, σ, K) ≤ A(K)/T + B σ²/(qN) + D(K)                          (4.E.1)

* A(K), the optimisation term's constant, falls with the local work: a round
  moves the model ηK steps (∝ 1/(ηK) in the analyses of local SGD), until
  clipping at C caps what one round can move it;
* D(K), the client drift (Karimireddy et al. 2020, SCAFFOLD, Thm. I;
  Woodworth et al. 2020): local steps walk towards each client's own optimum,
  an error floor growing ∝ η²K²ζ² with the clients' dissimilarity ζ²;
* B, the noise's constant, does not depend on K: the released update is
  clipped to C whatever the local work, and the noise is σC on it.

With K fixed, (4.E.1) is (1.2) with κ_K = B/A(K): the design is today's at
κ_K.  Across K, in units of A(K₀) (the local work κ was measured at), with
r_K = A(K₀)/A(K) and the design's bound u_K = 1/T + κ_K σ²/(qN) at κ_K:

    U(K) = u_K / r_K + (D(K) − D(K₀)) / A(K₀)                               (4.E.2)

A(K) and D(K) are measured, not assumed: noise-free runs on public data at
each K give the test loss L(T; K) = c_K + A(K)/T over the T grid, with
c_K = L* + D(K) (least squares, A ≥ 0; bootstrap over seeds).  B = κ·A(K₀).
The optimum in K is interior when A(K) falls while c_K rises.

numpy only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

#: the format tag of a fit's ``local_work`` part
LOCAL_WORK_FORMAT = "paretofl-local-work-1"
#: where a pre-trial scores its runs' loss: samples held out of its own training data (the default), or the data
#: set's test split (the stores made before held-out scoring, and a private pre-trial's: see Spec.scored_on)
SCORED_ON = ("held-out", "test")
#: the most local epochs a pre-trial measures (and a fit may name)
MAX_LOCAL_EPOCHS = 64
#: the widest spread of A(K) and the largest |c_K| a fit may hold: beyond, a constant is not a loss curve's
A_SPREAD, C_LIMIT = 1e6, 1e6


def curve(rounds, loss) -> tuple[float, float]:
    """(A, c) of L(T) = c + A/T by least squares over the given points,
    with A ≥ 0 (a curve that does not fall has A = 0 and c its mean)."""
    t = np.asarray(rounds, dtype=float)
    y = np.asarray(loss, dtype=float)
    ok = np.isfinite(y) & (t > 0)
    t, y = t[ok], y[ok]
    if len(t) < 2 or len(np.unique(t)) < 2:
        raise ValueError("the local-work curve needs finite losses at two or more T at least")
    x = 1.0 / t
    xc = x - x.mean()
    a = float(np.dot(xc, y - y.mean()) / np.dot(xc, xc))
    if a < 0:
        return 0.0, float(y.mean())
    return a, float(y.mean() - a * x.mean())


def _partition(v):
    """A fit's record of the partition: a name, or nothing."""
    if v is not None and not isinstance(v, str):
        raise ValueError(f"partition {v!r} is not a name")
    return v


@dataclass
class LocalWork:
    """What a pre-trial measured of the local work (a fit's ``local_work``):
    per local epochs K, the constants of L(T; K) = c_K + A(K)/T, bootstrap
    draws of both (over seeds), the K κ was measured at, the T range
    measured and the partition's dissimilarity."""

    epochs: list
    A: list
    c: list
    reference_epochs: int
    rounds: list                       # [smallest, largest] T measured
    draws_A: list = field(default_factory=list)    # [[A(K) for K] per bootstrap draw]
    draws_c: list = field(default_factory=list)
    seeds: int = 0
    dissimilarity: dict = field(default_factory=dict)
    q: float | None = None             # the pre-trial's q the local work ran at
    format: str = LOCAL_WORK_FORMAT
    # the clients' learning rate η of each curve, where the pre-trial measured the local work at several
    # (``local_lrs`` in its spec): then a curve is a pair (K, η) and the reference is (K₀, η₀), the pre-trial's
    # own; None where it measured one η (the pre-trial's), as every fit before η was measured
    lrs: list | None = None
    reference_lr: float | None = None

    @classmethod
    def from_dict(cls, d, where: str = "the fit") -> LocalWork:
        """Read (and check) a fit's ``local_work``: one clear line for anything wrong."""
        def bad(msg):
            raise ValueError(f"{where}: its local_work {msg}; make the file again from its store (\"paretofl fit "
                             "STORE\")")

        def count(v):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not float(v).is_integer():
                raise ValueError(f"{v!r} is not a whole number")
            return int(v)

        def number(v):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"{v!r} is not a finite number")
            return float(v)

        def numbers(v):
            if not isinstance(v, list):
                raise ValueError(f"{v!r} is not a list")
            return [number(x) for x in v]

        if not isinstance(d, dict) or d.get("format") != LOCAL_WORK_FORMAT:
            bad(f"is not paretofl's (format {LOCAL_WORK_FORMAT!r} expected)")
        try:
            if not isinstance(d["epochs"], list) or not isinstance(d["rounds"], list):
                raise ValueError("epochs and rounds must be lists")
            dis = d.get("dissimilarity") or {}
            if not isinstance(dis, dict):
                raise ValueError("dissimilarity must be a record")
            lw = cls(epochs=[count(k) for k in d["epochs"]], A=numbers(d["A"]), c=numbers(d["c"]),
                     reference_epochs=count(d["reference_epochs"]), rounds=[count(t) for t in d["rounds"]],
                     draws_A=[numbers(r) for r in d.get("draws_A") or []],
                     draws_c=[numbers(r) for r in d.get("draws_c") or []],
                     seeds=count(d.get("seeds", 0)), q=None if d.get("q") is None else number(d["q"]),
                     dissimilarity={k: (_partition(v) if k == "partition" else number(v)) for k, v in dis.items()},
                     lrs=None if d.get("lrs") is None else numbers(d["lrs"]),
                     reference_lr=None if d.get("reference_lr") is None else number(d["reference_lr"]))
        except (KeyError, TypeError, ValueError) as exc:
            bad(f"is malformed ({type(exc).__name__}: {exc})")
        k = len(lw.epochs)
        if (lw.lrs is None) != (lw.reference_lr is None) or lw.lrs is not None and (
                len(lw.lrs) != k or min(lw.lrs + [lw.reference_lr]) <= 0 or max(lw.lrs + [lw.reference_lr]) > 1e3):
            bad("gives learning rates that are not one in (0, 1000] per curve with the reference's beside them")
        keys = lw.settings()
        if k < 2 or len(lw.A) != k or len(lw.c) != k or len(set(keys)) != k:
            bad("must give A and c for two or more distinct local epochs (or pairs of local epochs and learning "
                "rate)")
        if keys != sorted(keys, key=lambda x: (x[1] or 0.0, x[0])):
            bad("lists its local epochs out of order (a fit lists them ascending, with A and c in that order; "
                "by learning rate first where it measured several)")
        if lw.seeds < 0 or (lw.q is not None and not 0 < lw.q <= 1):
            bad("holds a negative seed count or a q outside (0, 1]")
        if min(lw.epochs) < 1 or max(lw.epochs) > MAX_LOCAL_EPOCHS:
            bad(f"names local epochs outside [1, {MAX_LOCAL_EPOCHS}]")
        if lw.reference not in keys:
            bad(f"does not measure the local epochs the pre-trial's own runs used ({lw.label(lw.reference)})")
        if min(lw.A) < 0 or any(abs(c) > C_LIMIT for c in lw.c):
            bad("holds a negative A or a c no loss reaches")
        a0 = lw.A[keys.index(lw.reference)]
        if a0 <= 0:
            bad(f"has no 1/T term at the reference local epochs {lw.reference_epochs}: the loss did not fall with T")
        if any(a > 0 and not 1 / A_SPREAD <= a / a0 <= A_SPREAD for a in lw.A):
            bad(f"holds constants A more than {A_SPREAD:g} times apart: not loss curves of one model")
        if len(lw.rounds) != 2 or not 1 <= lw.rounds[0] <= lw.rounds[1]:
            bad("has no valid T range")
        if len(lw.draws_A) != len(lw.draws_c) or any(len(r) != k for r in lw.draws_A + lw.draws_c):
            bad("has bootstrap draws of the wrong shape")
        if any(min(r) < 0 for r in lw.draws_A) or any(abs(c) > C_LIMIT for r in lw.draws_c for c in r):
            bad("has bootstrap draws no loss curve gives")
        return lw

    def to_dict(self) -> dict:
        from dataclasses import asdict

        out = asdict(self)
        if self.lrs is None:            # a fit of one learning rate is written as before η was measured
            del out["lrs"], out["reference_lr"]
        return out

    # ------------------------------------------------------------------ the curves' keys
    def settings(self) -> list:
        """Each curve's key: (K, η), η None where the fit measured one learning rate (the pre-trial's)."""
        return [(k, None if self.lrs is None else lr) for k, lr in zip(self.epochs, self.lrs or self.epochs)]

    @property
    def reference(self) -> tuple:
        """(K₀, η₀): the local work κ was measured at (η₀ None where one learning rate was measured)."""
        return (self.reference_epochs, self.reference_lr)

    def key(self, k) -> tuple:
        """A curve's key from K (at the reference's η) or (K, η)."""
        if isinstance(k, tuple):
            return (int(k[0]), None if k[1] is None else float(k[1]))
        return (int(k), self.reference_lr)

    @staticmethod
    def label(key) -> str:
        k, lr = key
        return f"{k} local epoch{'s' if k != 1 else ''}" + ("" if lr is None else f" at eta {lr:g}")

    # ------------------------------------------------------------------ the model (4.E.2)
    def _at(self, k) -> int:
        """The index of K's curve (at the reference's η) or of (K, η)'s."""
        key = self.key(k)
        keys = self.settings()
        if key not in keys:
            kk = key[0]
            if kk in self.epochs and key[1] is not None:
                raise ValueError(f"local epochs {kk} at learning rate {key[1]:g} was not measured in the pre-trial "
                                 f"(it measured {', '.join(self.label(x) for x in keys)}): choose one of those, or "
                                 "add the rate to its local_lrs and run it again, then refit it")
            more = (f"add {kk} to its local_work and run the pre-trial again, then refit it" if kk <= MAX_LOCAL_EPOCHS
                    else f"a pre-trial measures at most {MAX_LOCAL_EPOCHS}")
            raise ValueError(f"local epochs {kk} was not measured in the pre-trial (it measured "
                             f"{', '.join(map(str, sorted(set(self.epochs))))}): choose one of those, or {more}")
        return keys.index(key)

    @property
    def a0(self) -> float:
        """A(K₀), the unit of (4.E.2)."""
        return self.A[self._at(self.reference)]

    def ratio(self, k: int) -> float:
        """r_K = A(K₀)/A(K): κ_K = κ·r_K (infinite where the loss no longer falls with T)."""
        a = self.A[self._at(k)]
        return self.a0 / a if a > 0 else math.inf

    def offset(self, k: int) -> float:
        """(D(K) − D(K₀))/A(K₀) = (c_K − c_K₀)/A(K₀): the drift K adds, in units of A(K₀)."""
        return (self.c[self._at(k)] - self.c[self._at(self.reference)]) / self.a0

    def objective(self, k: int, bound: float) -> float:
        """U(K) of (4.E.2) from the design's bound u_K at κ_K."""
        r = self.ratio(k)
        return (0.0 if math.isinf(r) else bound / r) + self.offset(k)

    def predicted_loss(self, k: int, rounds: int, noise_term: float, A=None, c=None) -> float:
        """L = c_K + A(K)/T + κ·A(K₀)·σ²r/(qN) (``noise_term`` = κσ²r/(qN)): the test loss (4.E.1) predicts."""
        A = self.A if A is None else A
        c = self.c if c is None else c
        i, i0 = self._at(k), self._at(self.reference)
        return float(c[i] + A[i] / rounds + A[i0] * noise_term)

    def interval(self, k: int, rounds: int, noise_terms) -> list | None:
        """The 95 % interval of the predicted loss over the bootstrap draws
        (and the given noise terms, e.g. at κ's interval's ends); None without draws."""
        if not self.draws_A:
            return None
        vals = [self.predicted_loss(k, rounds, nt, A, c) for A, c in zip(self.draws_A, self.draws_c)
                for nt in noise_terms]
        return [float(np.percentile(vals, 2.5)), float(np.percentile(vals, 97.5))]
