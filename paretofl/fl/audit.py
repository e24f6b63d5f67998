"""Empirical privacy audit: a lower bound on the ε each mechanism really spends.

For each mechanism the trainer implements, the real mechanism code (the
policy's round on the engine, with its clipping, noise and aggregation) is
run many times — one replica per run, thousands at once — on two
neighbouring inputs: with a canary and without.  A distinguishing test
(a threshold on the released model's projection onto the canary's
direction) guesses which; its false positive and false negative rates,
bounded by Clopper–Pearson, turn into a lower bound on ε through the DP
inequality P[test | with] ≤ e^ε P[test | without] + δ and its mirror
(Jagielski, Ullman, Oprea 2020; Nasr et al. 2021).  The threshold is chosen
on one half of the runs and the bound computed on the other half, so the
choice does not bias it; the two one-sided bounds are each taken at 97.5 %,
so the pair — and the ε bound — holds with 95 % confidence.

A claimed ε below the lower bound means the mechanism leaks more than its
accountant says.  Broken variants (noise scaled down tenfold, clipping
skipped) are built here to show the audit catches them.

Each audit is one round (one release): composition over rounds is the
accountant's arithmetic, checked against independent accountants in the
tests.  The canaries:

* client-level, aggregate view (N = 10, q = 0.5): the canary client's update
  is replaced by 10·C·u (u a coordinate no real client's update touches) in
  one world and by zero in the other — a neighbouring pair with sensitivity C,
  exactly the pair the subsampled Gaussian accountant bounds.  The others'
  updates are real local training; the adversary sees the released model.
* client-level, local view (N = 1, q = 1): the same canary, and the adversary
  sees the client's own noised update (the local view's claim is about it).
* sample-level DP-SGD (one client, Poisson batches at rate q_b): a sample
  with one huge feature no other sample has (its gradient is clipped) is
  added to the client's data or not (add/remove); one local step.
* NbAFL (one client): the canary sample replaces an ordinary sample
  (paper 004's replace-one relation); five local steps, parameter clipping,
  uplink noise.  ``nbafl`` calibrates σ_U to the ε that parameter clipping
  guarantees; ``nbafl-paper`` uses paper 004's calibration (sensitivity
  2C/m), whose nominal ε the audit shows to be exceeded — paretofl reports
  the guaranteed ε for it instead (see :mod:`.algorithms.nbafl`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .algorithms import DPFedAvg, NbAFL
from .algorithms.base import Ledger
from .data import Dataset
from .engine import Engine
from .models import build_model

MECHANISMS = ("client-aggregate", "client-local", "sample-dpsgd", "nbafl", "nbafl-paper")
BREAKS = ("none", "noise/10", "no-clip")

_D = 10            # ordinary features of the synthetic audit data; feature _D is the canary's
_CLASSES = 10
_BIG = 1e5         # the canary sample's value in its own feature


# --------------------------------------------------------------------------
# statistics
# --------------------------------------------------------------------------
def clopper_pearson_upper(k, n, alpha):
    """One-sided upper confidence bound (level 1 - alpha) on a binomial rate
    after k successes in n trials (Clopper–Pearson)."""
    from scipy.stats import beta

    k, n = np.asarray(k, dtype=float), np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore"):
        up = beta.ppf(1 - alpha, k + 1, np.maximum(n - k, 1e-300))
    return np.where(k >= n, 1.0, up)


def _bounds(fp, fn, n0, n1, delta, alpha):
    """ε lower bounds of every threshold, both directions, from counts."""
    fpr = clopper_pearson_upper(fp, n0, alpha / 2)
    fnr = clopper_pearson_upper(fn, n1, alpha / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.log(np.maximum(1 - delta - fnr, 0) / fpr)
        b = np.log(np.maximum(1 - delta - fpr, 0) / fnr)
    return np.nan_to_num(a, nan=-np.inf), np.nan_to_num(b, nan=-np.inf)


def _counts(s_out, s_in, t):
    """false positives (out-world scores > t) and false negatives (in-world ≤ t)."""
    fp = len(s_out) - np.searchsorted(np.sort(s_out), t, side="right")
    fn = np.searchsorted(np.sort(s_in), t, side="right")
    return fp, fn


def epsilon_lower_bound(s_out, s_in, delta, alpha=0.05, seed=0):
    """Empirical ε lower bound at confidence 1 - alpha from the scores of the
    runs without (``s_out``) and with (``s_in``) the canary; a higher score
    means "canary present".  Threshold chosen on a random half, bound
    computed on the other half.  Returns (ε_lower ≥ 0, details)."""
    s_out, s_in = np.asarray(s_out, dtype=float), np.asarray(s_in, dtype=float)
    rng = np.random.default_rng(seed)
    p0, p1 = rng.permutation(len(s_out)), rng.permutation(len(s_in))
    h0, h1 = len(s_out) // 2, len(s_in) // 2
    sel_out, ev_out = s_out[p0[:h0]], s_out[p0[h0:]]
    sel_in, ev_in = s_in[p1[:h1]], s_in[p1[h1:]]
    cand = np.unique(np.concatenate([sel_out, sel_in]))
    fp, fn = _counts(sel_out, sel_in, cand)
    a, b = _bounds(fp, fn, len(sel_out), len(sel_in), delta, alpha)
    i_a, i_b = int(np.argmax(a)), int(np.argmax(b))
    direction, t = ("in>", cand[i_a]) if a[i_a] >= b[i_b] else ("out>", cand[i_b])
    fp, fn = _counts(ev_out, ev_in, np.array([t]))
    a, b = _bounds(fp, fn, len(ev_out), len(ev_in), delta, alpha)
    eps = float((a if direction == "in>" else b)[0])
    info = {"threshold": float(t), "fpr": float(fp[0]) / len(ev_out), "fnr": float(fn[0]) / len(ev_in),
            "evaluated": len(ev_out) + len(ev_in)}
    return max(eps, 0.0), info


# --------------------------------------------------------------------------
# the mechanisms under audit
# --------------------------------------------------------------------------
class _UnclippedEngine(Engine):
    """A broken engine: clipping skipped everywhere (per-sample gradients,
    client updates, uploaded parameters)."""

    def clip_rows(self, v, clip):
        return v, v.norm(dim=1)

    def _grads_chunked(self, params, idx, w, clip):
        return super()._grads_chunked(params, idx, w, None)


class _CanaryDPFedAvg(DPFedAvg):
    """Client-level DP-FedAvg whose client 0 sends ``canary`` (a flat update,
    before clipping) instead of what its local training produced."""

    canary = None

    def _client_updates(self, glob, sel):
        upd = super()._client_updates(glob, sel)
        upd[torch.arange(self.engine.R, device=upd.device) * self.engine.N] = self.canary
        return upd


def _synthetic(n_samples, seed, canary_label=None, replace=False):
    """Gaussian features with a linear labelling, feature _D zero everywhere;
    with ``canary_label``, a canary sample (feature _D = _BIG, others 0) is
    added (or replaces the last sample when ``replace``)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_samples, _D + 1, generator=g)
    x[:, _D] = 0
    w_true = torch.randn(_D + 1, _CLASSES, generator=g)
    y = (x @ w_true).argmax(1)
    if canary_label is not None:
        xc = torch.zeros(1, _D + 1)
        xc[0, _D] = _BIG
        yc = torch.tensor([canary_label])
        x, y = (torch.cat([x[:-1], xc]), torch.cat([y[:-1], yc])) if replace else \
            (torch.cat([x, xc]), torch.cat([y, yc]))
    shape = (1, 1, _D + 1)
    return Dataset("audit", x.reshape(-1, *shape), y, x[:50].reshape(-1, *shape), y[:50])


def _engine(ds, n_clients, replicas, first_seed, broken):
    n = len(ds.y_train) // n_clients
    parts = [np.arange(i * n, (i + 1) * n if i < n_clients - 1 else len(ds.y_train)) for i in range(n_clients)]
    cls = _UnclippedEngine if broken == "no-clip" else Engine
    net = build_model("lr", ds.x_train.shape[1:], _CLASSES)
    return cls(net, ds, parts, replicas, seeds=range(first_seed, first_seed + replicas))


def _canary_column(glob):
    """Flat indices of the weights of the canary feature (one per class)."""
    out = glob[0].shape[-1]
    return torch.arange(_D * out, (_D + 1) * out)


def _initial(eng):
    """Each replica's initial model with the canary feature's weights set to
    zero: the auditor sends the model, and a canary the model already fits
    would have no gradient."""
    glob = eng.init_global()
    glob[0][:, _D, :] = 0
    return glob


@dataclass
class Setting:
    """One mechanism's audit setting; ``sigma`` etc. are the claimed values."""

    mechanism: str
    sigma: float = 1.0
    clip: float = 1.0
    q: float = 0.5
    clients: int = 10
    samples: int = 200       # per client
    lr: float = 0.1
    epsilon: float = 1.0     # NbAFL's calibration target
    delta: float = 1e-5
    calibration: str = "clipping"  # NbAFL: "clipping" (guaranteed) or "paper" (paper 004's)


DEFAULTS = {
    # noise multipliers chosen so one release claims ε ≈ 2 at δ = 1e-5: high
    # enough to be measurable with 10^4 runs, low enough that breaking the
    # mechanism pushes the truth far above it
    "client-aggregate": Setting("client-aggregate", sigma=0.85, q=0.5, clients=10, samples=20),
    "client-local": Setting("client-local", sigma=2.4, q=1.0, clients=1, samples=20),
    "sample-dpsgd": Setting("sample-dpsgd", sigma=1.9, q=0.5, clients=1, samples=200),
    "nbafl": Setting("nbafl", clip=10.0, clients=1, samples=64, lr=0.05, epsilon=2.0),
    "nbafl-paper": Setting("nbafl-paper", clip=10.0, clients=1, samples=64, lr=0.05, epsilon=1.0,
                           calibration="paper"),
}


def _policy(s: Setting, eng, broken="none"):
    """The mechanism of ``s`` as the trainer builds it, on ``eng``; with
    ``broken="noise/10"`` its noise is divided by ten (the claim is not)."""
    factor = 0.1 if broken == "noise/10" else 1.0
    if s.mechanism.startswith("nbafl"):
        pol = NbAFL(eng, epsilon=s.epsilon, rounds=1, delta=s.delta, clip=s.clip, exposures=1, lr=s.lr,
                    local_steps=5, batch_size=64, calibration=s.calibration)
        pol.sigma_u, pol.sigma_d = pol.sigma_u * factor, pol.sigma_d * factor
        return pol
    if s.mechanism == "sample-dpsgd":
        return DPFedAvg(eng, mechanism="sample", sigma=s.sigma * factor, clip=s.clip, lr=s.lr, batch_rate=s.q,
                        local_steps=1, client_rate=1.0)
    view = "aggregate" if s.mechanism == "client-aggregate" else "local"
    return _CanaryDPFedAvg(eng, mechanism="client", sigma=s.sigma * factor, clip=s.clip, lr=s.lr,
                           client_rate=s.q, view=view, batch_size=64)


def _scores_client(s: Setting, world, replicas, first_seed, broken):
    ds = _synthetic(s.samples * s.clients, seed=12345)
    eng = _engine(ds, s.clients, replicas, first_seed, broken)
    pol = _policy(s, eng, broken)
    glob = _initial(eng)
    k = int(_canary_column(glob)[0])        # W[canary feature, class 0]: untouched by real clients
    canary = torch.zeros(eng.net.n_params)
    if world == "in":
        canary[k] = 10 * s.clip             # 10 C before clipping
    pol.canary = canary
    new = pol.round(0, glob, np.ones(eng.R, dtype=bool))
    release = Engine.flat(new) - Engine.flat(glob)
    return release[:, k].cpu().numpy()


def _scores_sample(s: Setting, world, replicas, first_seed, broken):
    label = 0
    ds = _synthetic(s.samples, seed=12345, canary_label=label if world == "in" else None)
    eng = _engine(ds, 1, replicas, first_seed, broken)
    pol = _policy(s, eng, broken)
    glob = _initial(eng)
    col = _canary_column(glob)
    # the canary's gradient on its own weights is (p - e_y) x_c: its direction
    # from each replica's initial model (the auditor knows the model it sent)
    xc = torch.zeros(eng.R, 1, 1, 1, _D + 1)
    xc[..., _D] = _BIG
    p = torch.softmax(eng.net.forward(glob, xc)[:, 0], -1)
    v = p - torch.nn.functional.one_hot(torch.tensor(label), _CLASSES).to(p)
    v = v / v.norm(dim=1, keepdim=True)
    new = pol.round(0, glob, np.ones(eng.R, dtype=bool))
    release = Engine.flat(new)[:, col] - Engine.flat(glob)[:, col]
    return -(release * v).sum(1).cpu().numpy()


def _scores_nbafl(s: Setting, world, replicas, first_seed, broken):
    label = 0
    ds = _synthetic(s.samples, seed=12345, canary_label=label if world == "in" else None, replace=True)
    eng = _engine(ds, 1, replicas, first_seed, broken)
    pol = _policy(s, eng, broken)
    glob = _initial(eng)
    k = int(_canary_column(glob)[label])
    new = pol.round(0, glob, np.ones(eng.R, dtype=bool))
    return Engine.flat(new)[:, k].cpu().numpy()


_RUNNERS = {"client-aggregate": _scores_client, "client-local": _scores_client,
            "sample-dpsgd": _scores_sample, "nbafl": _scores_nbafl, "nbafl-paper": _scores_nbafl}


def claimed_epsilon(s: Setting) -> float:
    """The ε the trainer reports for one round of the (unbroken) mechanism of
    ``s``: the policy's own charge on the trainer's ledger, or NbAFL's
    guaranteed ε."""
    n = s.samples * (s.clients if s.mechanism.startswith("client") else 1)
    pol = _policy(s, _engine(_synthetic(n, seed=12345), s.clients, 1, 0, "none"))
    if pol.fixed_epsilon() is not None:
        return float(pol.fixed_epsilon())
    ledger = Ledger(1, s.delta)
    return float(ledger.epsilon(ledger.increment(pol.charges(0)))[0])


@dataclass
class AuditResult:
    mechanism: str
    broken: str
    epsilon_claimed: float
    epsilon_lower: float
    runs: int
    delta: float
    details: dict

    @property
    def violated(self) -> bool:
        return self.epsilon_lower > self.epsilon_claimed

    def as_dict(self):
        return {"mechanism": self.mechanism, "epsilon_claimed": self.epsilon_claimed,
                "epsilon_lower": self.epsilon_lower, "runs": self.runs, "broken": self.broken,
                "delta": self.delta, "violated": self.violated, **self.details}


def audit(mechanism: str, runs: int = 20000, broken: str = "none", chunk: int = 5000, seed: int = 0,
          setting: Setting | None = None, progress=None) -> AuditResult:
    """Audit one mechanism with ``runs`` releases (half with the canary).

    ``broken`` = "noise/10" or "no-clip" audits a deliberately broken copy
    against the unbroken mechanism's claimed ε.  ``progress(n)`` is called
    after each chunk with the n runs it added (a progress bar's update).
    """
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown mechanism {mechanism!r}; choose from {', '.join(MECHANISMS)}")
    if broken not in BREAKS:
        raise ValueError(f"unknown break {broken!r}; choose from {', '.join(BREAKS)}")
    if not (isinstance(runs, (int, np.integer)) and 200 <= runs <= 10**7):
        raise ValueError(f"runs must be an integer in [200, 10^7], got {runs!r}")
    s = setting or DEFAULTS[mechanism]
    run = _RUNNERS[mechanism]
    half = runs // 2
    scores = {"out": [], "in": []}
    base = 1 + seed * 10**8
    for w, world in enumerate(("out", "in")):
        for start in range(0, half, chunk):
            n = min(chunk, half - start)
            scores[world].append(run(s, world, n, base + w * 5 * 10**7 + start, broken))
            if progress is not None:
                progress(n)
    s_out, s_in = np.concatenate(scores["out"]), np.concatenate(scores["in"])
    eps, info = epsilon_lower_bound(s_out, s_in, s.delta, seed=seed)
    if s.mechanism == "nbafl-paper":
        info["epsilon_paper"] = s.epsilon
    return AuditResult(mechanism, broken, claimed_epsilon(s), eps, 2 * half, s.delta, info)
