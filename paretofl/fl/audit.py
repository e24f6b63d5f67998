"""Empirical privacy audit: a lower bound on the ε each mechanism really spends.

For each mechanism the trainer implements, the real mechanism code (the
policy's round on the engine, with its clipping, noise and aggregation) is
run many times — one replica per run, thousands at once — on two
neighbouring inputs: with a canary and without.  A distinguishing test
guesses which; its false positive and false negative rates, bounded by
Clopper–Pearson, turn into a lower bound on ε through the DP inequality
P[test | with] ≤ e^ε P[test | without] + δ and its mirror (Jagielski,
Ullman, Oprea 2020; Nasr et al. 2021).

The test is a threshold on a score of what the adversary sees.  Two scores
are tried: the release's projection onto the canary's direction (a shift in
the mean), and its squared norm (a change in the spread: the released noise
revealing how many clients came, or a divisor revealing a data set's size).
The score, its direction and its threshold are chosen on one half of the
runs and the bound computed on the other half, so the choice does not bias
it; the two one-sided bounds are each taken at 97.5 %, so the pair — and the
ε bound — holds with 95 % confidence.

A claimed ε below the lower bound means the mechanism leaks more than its
accountant says.  Broken copies are built here to show that the audit
catches them: noise divided by ten, clipping skipped, and, per mechanism,
the flaw each had before it was fixed (the aggregate view's top-up that let
the noise reveal the cohort's size; DP-SGD dividing by the data's own
count; the local view charged as if subsampling hid who took part).

Each audit is one round (one release): composition over rounds is the
accountant's arithmetic, checked against independent accountants in the
tests.  The settings (:data:`DEFAULTS`):

* ``client-aggregate`` (N = 4, q = 0.5): add/remove one client.  With the
  canary, client 0 exists and, when sampled, sends 10·C·u (u a coordinate no
  real client touches; clipped to C); without it, client 0 is not there at
  all — it neither counts in the cohort nor adds noise.  The adversary sees
  the released model.
* ``client-local`` (N = 1, q = 0.05): client 0's data replaced by none (its
  update zero) or not; it takes part with probability q either way, and the
  adversary sees its noised update whenever it does (and that it did).
* ``sample`` (one client of 8 samples, Poisson batches at rate q_b): a
  sample with one huge feature no other sample has (its gradient is clipped)
  is added to the client's data or not (add/remove); one local step; the
  adversary sees the client's update.
* ``nbafl`` (one client): the canary sample replaces an ordinary sample
  (NbAFL's replace-one relation); five local steps, parameter clipping,
  uplink noise.  ``nbafl`` calibrates σ_U to the ε that parameter clipping
  guarantees; ``nbafl-paper`` uses NbAFL's calibration, whose nominal ε
  the audit shows to be exceeded — paretofl reports the guaranteed ε.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..theory.privacy import compute_epsilon
from .algorithms import DPFedAvg, NbAFL
from .algorithms.base import Ledger
from .data import Dataset
from .engine import Engine
from .models import build_model
from .options import AUDIT_APPLIES, AUDIT_BREAKS, AUDIT_MECHANISMS

MECHANISMS = AUDIT_MECHANISMS
#: broken copies: every mechanism's two, and the flaw each had before its fix
BREAKS = AUDIT_BREAKS
APPLIES = AUDIT_APPLIES

_CLASSES = 10
_BIG = 1e5         # the canary sample's value in its own feature


def breaks_for(mechanism: str) -> list[str]:
    """The broken copies that apply to ``mechanism`` (besides "none")."""
    return [b for b in BREAKS[1:] if mechanism in APPLIES.get(b, MECHANISMS)]


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
    runs without (``s_out``) and with (``s_in``) the canary.  Each may be
    one score per run (a 1-d array) or several (a dict name -> 1-d array):
    the score, the direction and the threshold are chosen on a random half
    of the runs, the bound computed on the other half.  Returns
    (ε_lower ≥ 0, details)."""
    if not isinstance(s_out, dict):
        s_out, s_in = {"score": s_out}, {"score": s_in}
    # a test may call either world's scores high: each score is tried as it
    # is and negated (with the two directions of the DP inequality below,
    # that is every threshold test on it)
    s_out = {**s_out, **{"-" + k: -np.asarray(v, dtype=float) for k, v in s_out.items()}}
    s_in = {**s_in, **{"-" + k: -np.asarray(v, dtype=float) for k, v in s_in.items()}}
    n_out, n_in = len(next(iter(s_out.values()))), len(next(iter(s_in.values())))
    rng = np.random.default_rng(seed)
    p0, p1 = rng.permutation(n_out), rng.permutation(n_in)
    h0, h1 = n_out // 2, n_in // 2
    best = None
    for name in s_out:
        so, si = np.asarray(s_out[name], dtype=float), np.asarray(s_in[name], dtype=float)
        sel_out, sel_in = so[p0[:h0]], si[p1[:h1]]
        cand = np.unique(np.concatenate([sel_out, sel_in]))
        cand = cand[np.isfinite(cand)]
        if cand.size == 0:
            continue
        fp, fn = _counts(sel_out, sel_in, cand)
        a, b = _bounds(fp, fn, len(sel_out), len(sel_in), delta, alpha)
        i_a, i_b = int(np.argmax(a)), int(np.argmax(b))
        for val, direction, t in ((a[i_a], "in>", cand[i_a]), (b[i_b], "out>", cand[i_b])):
            if best is None or val > best[0]:
                best = (val, name, direction, t)
    if best is None:
        return 0.0, {"score": None}
    _, name, direction, t = best
    ev_out = np.asarray(s_out[name], dtype=float)[p0[h0:]]
    ev_in = np.asarray(s_in[name], dtype=float)[p1[h1:]]
    fp, fn = _counts(ev_out, ev_in, np.array([t]))
    a, b = _bounds(fp, fn, len(ev_out), len(ev_in), delta, alpha)
    eps = float((a if direction == "in>" else b)[0])
    info = {"score": name, "direction": direction, "threshold": float(t), "fpr": float(fp[0]) / len(ev_out),
            "fnr": float(fn[0]) / len(ev_in), "evaluated": len(ev_out) + len(ev_in)}
    return max(eps, 0.0), info


# --------------------------------------------------------------------------
# the mechanisms under audit
# --------------------------------------------------------------------------
class _UnclippedEngine(Engine):
    """A broken engine: clipping skipped everywhere (per-sample gradients,
    client updates, uploaded parameters)."""

    def clip_rows(self, v, clip):
        return v, v.norm(dim=1)

    def _grads_chunked(self, params, idx, w, clip, seeds=None):
        return super()._grads_chunked(params, idx, w, None, seeds)


class _CanaryDPFedAvg(DPFedAvg):
    """Client-level DP-FedAvg whose client 0 sends ``canary`` (a flat update,
    before clipping) instead of what its local training produced, or, with
    ``absent``, is not there at all (never in the cohort)."""

    canary = None
    absent = False
    legacy_topup = False

    def _selection(self, active):
        c = super()._selection(active)
        if self.absent:
            mask = c.mask.clone()
            mask[:, 0] = False
            c = self.engine.cohort(mask)
        return c

    def _client_updates(self, glob, c):
        upd = super()._client_updates(glob, c)
        upd[c.client == 0] = self.canary
        return upd

    def noise_stds(self, c):
        if not self.legacy_topup:
            return super().noise_stds(c)
        # the release before its fix: each client adds σ²C², the server tops
        # a small cohort up to qNσ²C² — so a large cohort shows in the noise
        eng = self.engine
        sc = torch.as_tensor(self.sigma * self.clip, dtype=eng.dtype, device=eng.device)
        qn = torch.as_tensor(self.client_rate * eng.N, dtype=eng.dtype, device=eng.device)
        return sc[c.replica], sc * (qn - torch.as_tensor(c.counts, dtype=eng.dtype)).clamp(min=0).sqrt()


def _synthetic(n_samples, seed, features, canary_label=None, replace=False):
    """Gaussian features with a linear labelling, the last feature zero
    everywhere; with ``canary_label``, a canary sample (last feature _BIG,
    others 0) is added (or replaces the last sample when ``replace``)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_samples, features + 1, generator=g)
    x[:, features] = 0
    w_true = torch.randn(features + 1, _CLASSES, generator=g)
    y = (x @ w_true).argmax(1)
    if canary_label is not None:
        xc = torch.zeros(1, features + 1)
        xc[0, features] = _BIG
        yc = torch.tensor([canary_label])
        x, y = (torch.cat([x[:-1], xc]), torch.cat([y[:-1], yc])) if replace else \
            (torch.cat([x, xc]), torch.cat([y, yc]))
    shape = (1, 1, features + 1)
    return Dataset("audit", x.reshape(-1, *shape), y, x[:50].reshape(-1, *shape), y[:50])


def _engine(ds, n_clients, replicas, first_seed, broken):
    n = len(ds.y_train) // n_clients
    parts = [np.arange(i * n, (i + 1) * n if i < n_clients - 1 else len(ds.y_train)) for i in range(n_clients)]
    cls = _UnclippedEngine if broken == "no-clip" else Engine
    net = build_model("lr", ds.x_train.shape[1:], _CLASSES)
    return cls(net, ds, parts, replicas, seeds=range(first_seed, first_seed + replicas))


def _canary_column(glob, features):
    """Flat indices of the weights of the canary feature (one per class)."""
    out = glob[0].shape[-1]
    return torch.arange(features * out, (features + 1) * out)


def _initial(eng, features):
    """Each replica's initial model with the canary feature's weights set to
    zero: the auditor sends the model, and a canary the model already fits
    would have no gradient."""
    glob = eng.init_global()
    glob[0][:, features, :] = 0
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
    features: int = 10       # ordinary features of the synthetic data (the model has (features+1)·10+10 weights)
    lr: float = 0.1
    epsilon: float = 1.0     # NbAFL's calibration target
    delta: float = 1e-5
    calibration: str = "clipping"  # NbAFL: "clipping" (guaranteed) or "paper" (NbAFL's)
    rates: tuple = ()        # groups-*: each group's sampling rate (strict first); the canary client 0 is in
    group_of: tuple = ()     # ... the group group_of[0] (aggregate view, one noise on the sum)


DEFAULTS = {
    # noise multipliers chosen so one release claims ε ≈ 2 at δ = 1e-5: high
    # enough to be measurable with 10^5 runs, low enough that breaking the
    # mechanism pushes the truth far above it; 50 features (520 weights)
    # where the release's norm carries the leak a break adds
    "client-aggregate": Setting("client-aggregate", sigma=1.1, q=0.5, clients=4, samples=20, features=50),
    "client-local": Setting("client-local", sigma=1.75, q=0.05, clients=1, samples=20),
    "sample": Setting("sample", sigma=1.9, q=0.5, clients=1, samples=8, features=50),
    "nbafl": Setting("nbafl", clip=10.0, clients=1, samples=64, lr=0.05, epsilon=2.0),
    "nbafl-paper": Setting("nbafl-paper", clip=10.0, clients=1, samples=64, lr=0.05, epsilon=1.0,
                           calibration="paper"),
    # clients with budgets of their own: a strict group sampled at 0.01 and a
    # loose one at 1, one noise on the sum (z = σ√m = 1.2, m = 2.02); the
    # canary client in the strict group, or in the loose one
    "groups-strict": Setting("groups-strict", sigma=1.2 / math.sqrt(2.02), clients=4, samples=20, features=50,
                             rates=(0.01, 1.0), group_of=(0, 0, 1, 1)),
    "groups-loose": Setting("groups-loose", sigma=1.2 / math.sqrt(2.02), clients=4, samples=20, features=50,
                            rates=(0.01, 1.0), group_of=(1, 0, 0, 1)),
}


def _group_design(s: Setting):
    """The audit setting's groups as a :class:`paretofl.budgets.GroupDesign`
    (the budgets are the design's own ε: the audit checks the charge)."""
    from ..budgets import GroupDesign

    rates = [s.rates[g] for g in s.group_of]
    m = float(sum(rates))
    groups = [dict(budget=float(b), clients=s.group_of.count(g), share=s.group_of.count(g) / s.clients, q=q,
                   sigma=s.sigma, epsilon=0.0) for g, (q, b) in enumerate(zip(s.rates, (1.0, 2.0)))]
    return GroupDesign("client-aggregate", s.clients, 1, s.delta, m, s.sigma, s.sigma * math.sqrt(m), 0.0, 1.0,
                       "audit", 1, groups, list(s.group_of))


def _policy(s: Setting, eng, broken="none", sizes=None):
    """The mechanism of ``s`` as the trainer builds it, on ``eng``; with
    ``broken="noise/10"`` its noise is divided by ten (the claim is not)."""
    factor = 0.1 if broken == "noise/10" else 1.0
    if s.mechanism.startswith("nbafl"):
        pol = NbAFL(eng, epsilon=s.epsilon, rounds=1, delta=s.delta, clip=s.clip, exposures=1, lr=s.lr,
                    local_steps=5, batch_size=64, calibration=s.calibration, sizes=sizes)
        pol.sigma_u, pol.sigma_d = pol.sigma_u * factor, pol.sigma_d * factor
        return pol
    if s.mechanism == "sample":
        return DPFedAvg(eng, mechanism="sample", sigma=s.sigma * factor, clip=s.clip, lr=s.lr, batch_rate=s.q,
                        local_steps=1, client_rate=1.0, sizes=sizes)
    if s.mechanism.startswith("groups"):
        gd = _group_design(s)
        pol = _CanaryDPFedAvg(eng, mechanism="client-aggregate", sigma=s.sigma * factor, clip=s.clip, lr=s.lr,
                              client_rate=gd.q, batch_size=64, groups=gd)
        pol.sigma = pol.sigma * factor
        if broken == "loosest-rate":   # every group sampled at the loosest rate; each still claimed at its own
            pol.rates[:] = max(s.rates)
        return pol
    pol = _CanaryDPFedAvg(eng, mechanism=s.mechanism, sigma=s.sigma * factor, clip=s.clip, lr=s.lr,
                          client_rate=s.q, batch_size=64)
    pol.legacy_topup = broken == "legacy-topup"
    return pol


def _flat_release(eng, new, glob):
    return Engine.flat(new) - Engine.flat(glob)


def _scores_client(s: Setting, world, replicas, first_seed, broken):
    ds = _synthetic(s.samples * s.clients, 12345, s.features)
    eng = _engine(ds, s.clients, replicas, first_seed, broken)
    pol = _policy(s, eng, broken)
    glob = _initial(eng, s.features)
    k = int(_canary_column(glob, s.features)[0])   # W[canary feature, class 0]: untouched by real clients
    canary = torch.zeros(eng.net.n_params)
    if world == "in":
        canary[k] = 10 * s.clip                     # 10 C before clipping
    pol.canary = canary
    active = np.ones(eng.R, dtype=bool)
    if s.mechanism == "client-local":
        # zero-out neighbours: client 0 takes part either way; the adversary
        # sees its noised update when it does, and that it did
        c = pol._selection(active)
        noisy, _ = pol.privatise(pol._client_updates(glob, c), c)
        proj = np.full(eng.R, -np.inf)
        first = c.client == 0
        proj[c.replica[first].cpu().numpy()] = noisy[first, k].cpu().numpy()
        return {"projection": proj}
    pol.absent = world == "out"                     # add/remove neighbours: absent, not silent
    new = pol.round(0, glob, active)
    release = _flat_release(eng, new, glob)
    return {"projection": release[:, k].cpu().numpy(), "norm": release.pow(2).sum(1).cpu().numpy()}


def _scores_sample(s: Setting, world, replicas, first_seed, broken):
    label = 0
    ds = _synthetic(s.samples, 12345, s.features, canary_label=label if world == "in" else None)
    eng = _engine(ds, 1, replicas, first_seed, broken)
    # the client's declared size is the same public number in both worlds;
    # the broken copy divides by its own data's count instead
    pol = _policy(s, eng, broken, sizes=None if broken == "private-divisor" else [s.samples])
    glob = _initial(eng, s.features)
    col = _canary_column(glob, s.features)
    # the canary's gradient on its own weights is (p - e_y) x_c: its direction
    # from each replica's initial model (the auditor knows the model it sent)
    xc = torch.zeros(eng.R, 1, 1, 1, s.features + 1)
    xc[..., s.features] = _BIG
    p = torch.softmax(eng.net.forward(glob, xc)[:, 0], -1)
    v = p - torch.nn.functional.one_hot(torch.tensor(label), _CLASSES).to(p)
    v = v / v.norm(dim=1, keepdim=True)
    new = pol.round(0, glob, np.ones(eng.R, dtype=bool))
    release = _flat_release(eng, new, glob)
    return {"projection": -(release[:, col] * v).sum(1).cpu().numpy(), "norm": release.pow(2).sum(1).cpu().numpy()}


def _scores_nbafl(s: Setting, world, replicas, first_seed, broken):
    label = 0
    ds = _synthetic(s.samples, 12345, s.features, canary_label=label if world == "in" else None, replace=True)
    eng = _engine(ds, 1, replicas, first_seed, broken)
    pol = _policy(s, eng, broken)
    glob = _initial(eng, s.features)
    k = int(_canary_column(glob, s.features)[label])
    new = pol.round(0, glob, np.ones(eng.R, dtype=bool))
    return {"projection": Engine.flat(new)[:, k].cpu().numpy()}


_RUNNERS = {"client-aggregate": _scores_client, "client-local": _scores_client,
            "sample": _scores_sample, "nbafl": _scores_nbafl, "nbafl-paper": _scores_nbafl,
            "groups-strict": _scores_client, "groups-loose": _scores_client}


def claimed_epsilon(s: Setting, broken: str = "none") -> float:
    """The ε the trainer reports for one round of the mechanism of ``s``: the
    policy's own charge on the trainer's ledger, or NbAFL's guaranteed ε.
    ``broken="amplified-claim"``: the local view charged as the aggregate
    view's subsampled Gaussian (q, σ), as paretofl did before its fix."""
    if broken == "amplified-claim":
        return compute_epsilon(s.q, s.sigma, 1, s.delta)
    n = s.samples * (s.clients if s.mechanism.startswith(("client", "groups")) else 1)
    pol = _policy(s, _engine(_synthetic(n, 12345, s.features), s.clients, 1, 0, "none"))
    if pol.fixed_epsilon() is not None:
        return float(pol.fixed_epsilon())
    ledger = Ledger(pol.n_groups, s.delta)
    ch = pol.charges(0)
    ledger.commit(ch, ledger.increment(ch), np.ones(pol.n_groups, dtype=bool))
    # the canary client's own ledger: its group's
    return float(ledger.epsilon()[s.group_of[0] if s.group_of else 0])


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

    ``broken`` (see :data:`BREAKS`, :func:`breaks_for`) audits a deliberately
    broken copy against the unbroken mechanism's claimed ε (for
    "amplified-claim", the real mechanism against the charge paretofl made
    before its fix).  ``progress(n)`` is called after each chunk with the n
    runs it added (a progress bar's update).
    """
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown mechanism {mechanism!r}; choose from {', '.join(MECHANISMS)}")
    if broken != "none" and broken not in breaks_for(mechanism):
        raise ValueError(f"unknown break {broken!r} for {mechanism}; choose from "
                         f"{', '.join(['none', *breaks_for(mechanism)])}")
    if isinstance(runs, bool) or not (isinstance(runs, (int, np.integer)) and 200 <= runs <= 10**7):
        raise ValueError(f"runs must be an integer in [200, 10^7], got {runs!r}")
    s = setting or DEFAULTS[mechanism]
    run = _RUNNERS[mechanism]
    half = runs // 2
    scores = {"out": [], "in": []}
    base = 1 + seed * 10**8
    mech_break = "none" if broken == "amplified-claim" else broken
    for w, world in enumerate(("out", "in")):
        for start in range(0, half, chunk):
            n = min(chunk, half - start)
            scores[world].append(run(s, world, n, base + w * 5 * 10**7 + start, mech_break))
            if progress is not None:
                progress(n)
    s_out = {k: np.concatenate([c[k] for c in scores["out"]]) for k in scores["out"][0]}
    s_in = {k: np.concatenate([c[k] for c in scores["in"]]) for k in scores["in"][0]}
    eps, info = epsilon_lower_bound(s_out, s_in, s.delta, seed=seed)
    if s.mechanism == "nbafl-paper":
        info["epsilon_paper"] = s.epsilon
    return AuditResult(mechanism, broken, claimed_epsilon(s, broken), eps, 2 * half, s.delta, info)


__all__ = ["MECHANISMS", "BREAKS", "DEFAULTS", "Setting", "AuditResult", "audit", "breaks_for",
           "claimed_epsilon", "epsilon_lower_bound", "clopper_pearson_upper"]
