"""Empirical privacy audit: a lower bound on the ε each mechanism really spends.

For every audit setting a mechanism declares (:mod:`paretofl.mechanisms`,
``audits``), the real mechanism code — the trainer's release of that
mechanism (:mod:`paretofl.fl.release`), with its selection, clipping, noise
and aggregation, driven through its public methods — is run many times, one
replica per run and thousands at once, on two neighbouring inputs: with a
canary and without.  A distinguishing test guesses which; its false positive
and false negative rates, bounded by Clopper–Pearson, turn into a lower
bound on ε through the DP inequality P[test | with] ≤ e^ε P[test | without]
+ δ and its mirror (Jagielski, Ullman, Oprea 2020; Nasr et al. 2021).

The test is a threshold on a score of what the adversary sees.  The scores
tried: the release's projection onto the canary's direction (a shift in the
mean), its squared norm (a change in the spread: the released noise
revealing how many clients came, or a divisor revealing a data set's size),
and with adaptive clipping the released count and its combinations with the
projection.  The score, its direction and its threshold are chosen on one
half of the runs and the bound computed on the other half, so the choice
does not bias it; the two one-sided bounds are each taken at 97.5 %, so the
pair — and the ε bound — holds with 95 % confidence.

A claimed ε below the lower bound means the mechanism leaks more than its
accountant says.  Each setting lists broken copies that the audit must
catch (:class:`paretofl.mechanisms.Break`): noise divided by ten, clipping
skipped, and per mechanism the flaw it had before its fix or that another
framework has.  A break in the release runs a broken copy of the release
here (``_BROKEN``) while the unbroken mechanism's ε is claimed; a break in
the claim runs the real release against an ε computed the broken way.

Each audit is one round (one release): composition over rounds is the
accountant's arithmetic, checked against independent accountants in the
tests.  Where the noise spans the rounds (BandMF) one release is the whole
run, at small T; where runs could share their noise (a private pre-trial's
runs at one seed) one release is the whole pipeline: the pre-trial's runs
and the training after it, claimed as the two composed.  The canary pairs (``AuditSetting.canary``):

* ``add-remove``: client 0 exists and, when sampled, sends 10·C·u (u a
  coordinate no real client touches; clipped to C), or does not exist at
  all — it neither counts in the cohort nor adds noise;
* ``zero-out`` (the local view): client 0 takes part with probability q
  either way, sending the canary or a zero update, and the adversary sees
  its noised update whenever it does (and that it did);
* ``witness-add-remove`` (a fixed cohort, add/remove): every client sends a
  = C·u and the added client -a; m are drawn from the clients present, so
  the added client can displace one and move the sum by 2C;
* ``witness-replace`` (a fixed cohort, replace-one): every client sends a,
  and in the neighbour client 0 sends -a;
* ``sample-add``: one client's data with or without a sample having one
  huge feature no other sample has (its gradient is clipped); one local step;
* ``sample-replace`` (NbAFL): the canary sample in place of an ordinary one;
  five local steps, parameter clipping, uplink noise;
* ``add-remove-run`` (noise correlated across rounds, BandMF): client 0
  exists and sends the canary in every round it is selected, or does not
  exist; the whole run of T rounds is one release (the noise spans them);
* ``add-remove-pipeline`` (a private pre-trial and the training after it):
  client 0 exists and sends the canary in every round of every run, or does
  not exist; the pre-trial's K runs at one seed (as its sweep assembles
  them) and the training's rounds are one release, scored by the real
  pipeline's likelihood ratio and by issue 44's recovery attack, which
  cancels noise the runs share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from ..mechanisms import REGISTRY, AuditSetting, audit_setting, audit_settings
from ..mechanisms import get as get_mechanism
from ..theory.privacy import Charge
from .build import Budget, Setup, assemble, assemble_pretrial
from .data import Dataset
from .engine import Engine
from .models import build_model
from .release import ClientGroups, CorrelatedRelease, SumRelease

_CLASSES = 10
_BIG = 1e5         # the canary sample's value in its own feature


def breaks_for(setting: str) -> list[str]:
    """The broken copies the audit setting ``setting`` lists."""
    return list(audit_setting(setting).break_names())


def settings_of(names=None) -> list[str]:
    """Audit setting names for ``names``: mechanism names (all of their
    settings) or setting names; every registered setting by default."""
    if names is None:
        return [s.name for s in audit_settings()]
    out = []
    for n in names:
        found = [s.name for s in audit_settings(n)] or [audit_setting(n).name]
        out += [x for x in found if x not in out]
    return out


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
# the releases under audit, and their broken copies
# --------------------------------------------------------------------------
class _UnclippedEngine(Engine):
    """A broken engine: clipping skipped everywhere (per-sample gradients,
    client updates, uploaded parameters)."""

    def clip_rows(self, v, clip):
        return v, v.norm(dim=1)

    def _grads_chunked(self, params, idx, w, clip, seeds=None):
        return super()._grads_chunked(params, idx, w, None, seeds)


class _LegacyTopup(SumRelease):
    """The aggregate view's release before 0.2.0: each client adds σ²C², the
    server tops a small cohort up to qNσ²C² — so a large cohort shows in
    the noise.  In terms of the mechanism's noise on the sum, s² = qNσ²C²
    (noise().std·C): each client adds s²/m, m = qN, and the server
    (m − |S|)s²/m where that is positive."""

    def noise_stds(self, c):
        eng = self.engine
        noise = self.noise()
        each = torch.as_tensor(noise.std * self.clip / np.sqrt(noise.divisor), dtype=eng.dtype, device=eng.device)
        m = torch.as_tensor(noise.divisor, dtype=eng.dtype, device=eng.device)
        return each[c.replica], each * (m - torch.as_tensor(c.counts, dtype=eng.dtype)).clamp(min=0).sqrt()


class _UncentredCount(SumRelease):
    """Adaptive clipping releasing the raw count of updates that fitted (it
    moves by 1 when a client is added, not by 1/2) with the 1/2-sensitivity
    split of the charge, as Flower 1.41's adaptive wrappers do."""

    def count_bits(self, c):
        return (self.last_norms <= self.engine.rows(self.clip, c)).to(self.engine.dtype)


class _NoiseAtNextClip(SumRelease):
    """Adaptive clipping that noises the sum with the clipping norm just
    updated, not the one its updates were clipped to (Flower 1.41's order:
    the count first, then the noise at the new C)."""

    def release(self, glob, updates, c, active):
        clipped = self.clip_updates(updates, c)
        self.adapt_clip(c, active)
        return self.noisy_mean(glob, clipped, c)


class _IndependentNoise(CorrelatedRelease):
    """BandMF's claim over independent noise: each round N(0, r z²C²),
    r = ‖AC⁻¹‖²_F/(T(T+1)/2) the error ratio of the strategy over the run —
    as much error on the model as the correlated noise leaves, with none of
    its cancelling (``rounds``: the run's T, set by the audit)."""

    rounds = 1

    def correlated_noise(self, d):
        return self.engine.normal((d,)) * math.sqrt(self.mech.error_ratio(self.rounds))


class _EveryRound(CorrelatedRelease):
    """Client 0 joins every round, not only its group's: the b-separation
    the charge assumes is broken."""

    def selected(self):
        sel = super().selected()
        sel[:, 0] = True
        return sel


#: breaks in the release: how each makes its broken copy of a policy's release
_BROKEN = {"legacy-topup": _LegacyTopup, "uncentred-count": _UncentredCount, "noise-at-next-clip": _NoiseAtNextClip,
           "independent-noise": _IndependentNoise, "every-round": _EveryRound}


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


def _setup(ds, n_clients) -> Setup:
    """The audit's data split into ``n_clients`` equal clients, and LR."""
    n = len(ds.y_train) // n_clients
    parts = [np.arange(i * n, (i + 1) * n if i < n_clients - 1 else len(ds.y_train)) for i in range(n_clients)]
    return Setup(ds, parts, build_model("lr", ds.x_train.shape[1:], _CLASSES))


def _engine(ds, n_clients, replicas, first_seed, broken):
    """An engine over the audit's data (the clipping broken where ``broken`` says)."""
    setup = _setup(ds, n_clients)
    cls = _UnclippedEngine if broken == "no-clip" else Engine
    return cls(setup.model, ds, setup.parts, replicas, seeds=range(first_seed, first_seed + replicas))


def _break_engine(pol, broken):
    """``pol`` with its engine's clipping skipped where ``broken`` is
    "no-clip" (the one engine the assembly built, broken in place: its
    release and policy see the same object)."""
    if broken == "no-clip":
        pol.engine.__class__ = _UnclippedEngine
    return pol


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


def _groups(s: AuditSetting) -> ClientGroups:
    """The setting's clients with budgets of their own (their budgets play
    no part: the audit checks the charge)."""
    p = s.params
    rates = p.get("rates") or (p["q"],) * len(p["sigmas"])
    sigmas = p.get("sigmas") or (p["sigma"],) * len(rates)
    of = list(p["group_of"])
    groups = [dict(budget=float(1 + g), clients=of.count(g), q=float(q), sigma=float(sg))
              for g, (q, sg) in enumerate(zip(rates, sigmas))]
    return ClientGroups(s.mechanism, p["clients"], groups, of)


def _policy(s: AuditSetting, ds, n_clients, replicas, first_seed, broken="none", sizes=None):
    """The mechanism of ``s`` as the trainer builds it (the one assembly,
    :func:`paretofl.fl.build.assemble`) over ``replicas`` runs on the data
    ``ds``, its release broken where ``broken`` is a break in the release."""
    p = s.params
    factor = 0.1 if broken == "noise/10" else 1.0
    seeds = range(first_seed, first_seed + replicas)
    setup = _setup(ds, n_clients)
    if s.canary == "sample-replace":          # NbAFL: its own algorithm, parameter clipping
        budget = Budget(epsilon=p["epsilon"], delta=p.get("delta", 1e-5), rounds=1, sizes=sizes)
        pol = _break_engine(assemble(setup, REGISTRY[s.mechanism].algorithm, seeds, budget=budget, clip=p["clip"],
                                     exposures=1, lr=p["lr"], local_steps=5, batch_size=64,
                                     calibration=p["calibration"]).policy, broken)
        pol.sigma_u, pol.sigma_d = pol.sigma_u * factor, pol.sigma_d * factor
        return pol
    if s.canary == "sample-add":              # DP-SGD inside the client
        budget = Budget(delta=p.get("delta", 1e-5), sizes=sizes)
        return _break_engine(assemble(setup, "dpfedavg", seeds, budget=budget, mechanism=s.mechanism,
                                      sigma=p["sigma"] * factor, clip=p.get("clip", 1.0), lr=p.get("lr", 0.1),
                                      batch_rate=p["q"], local_steps=1, client_rate=1.0,
                                      declared_sizes="data" if sizes is None else None).policy, broken)
    groups = _groups(s) if "group_of" in p else None
    sigma = (groups.groups[0]["sigma"] if groups is not None else p["sigma"]) * factor
    q = p["cohort"] / p["clients"] if "cohort" in p else (
        float(groups.client_rates().mean()) if groups is not None else p["q"])
    opts = {k: p[k] for k in REGISTRY[s.mechanism].constructor_options if k in p}
    budget = Budget(delta=p.get("delta", 1e-5), groups=groups, sizes=sizes)
    pol = _break_engine(assemble(setup, "dpfedavg", seeds, budget=budget, mechanism=s.mechanism, sigma=sigma,
                                 clip=p.get("clip", 1.0), lr=p.get("lr", 0.1), client_rate=q, batch_size=64,
                                 **opts).policy, broken)
    eng = pol.engine
    rel = pol.release
    if broken in _BROKEN:
        cfg = pol.config
        pol.release = _BROKEN[broken](pol.mech, eng, sigma=cfg.sigma, clip=cfg.clip, client_rate=cfg.client_rate,
                                      groups=groups, sizes=sizes)
        rel = pol.release
        if "rounds" in p:
            rel.rounds = p["rounds"]
    if groups is not None and factor != 1.0:   # with groups the release reads sigma from them
        rel.group_sigmas, rel.sigma = rel.group_sigmas * factor, rel.sigma * factor
    if broken == "loosest-rate":      # every group sampled at the loosest rate; each still claimed at its own
        rel.rates[:] = rel.rates.max()
    if broken == "loosest-sigma":     # every client noised at the loosest sigma; each still claimed at its own
        rel.group_sigmas[:] = rel.group_sigmas.min()
    if hasattr(rel, "modulus_bits"):     # a modular sum's broken copies (and the simulated dropout) set on its release
        from .quantise import break_release
        break_release(rel, broken, p)
    return pol


def _flat_release(eng, new, glob):
    return Engine.flat(new) - Engine.flat(glob)


def _adaptive_scores(pol, release, k, clip):
    """The count the release published, and the projection and the count
    combined as the likelihood ratio of the joint Gaussian would (weights
    from the setting's fixed numbers: never from state the round changed,
    such as the next C, which would differ between the worlds), at a few
    relative weights: the audit picks the best on its selection half."""
    rel = pol.release
    m = float(rel.cohort[0])
    z_sum = float(rel.noise().std[0]) or 1.0      # the sum's noise multiplier, as the mechanism says
    proj = release[:, k].cpu().numpy() * m / (z_sum * clip)
    count = rel.last_count.cpu().numpy()
    sb = float(rel.count_noise[0])
    out = {"count": count}
    for w in (0.25, 1.0, 4.0):
        out[f"joint{w:g}"] = proj / z_sum - w * count / (2 * sb * sb)
    return out


def _scores_client(s: AuditSetting, world, replicas, first_seed, broken):
    p = s.params
    ds = _synthetic(p["samples"] * p["clients"], 12345, p["features"])
    pol = _policy(s, ds, p["clients"], replicas, first_seed, broken)
    eng, rel = pol.engine, pol.release
    glob = _initial(eng, p["features"])
    k = int(_canary_column(glob, p["features"])[0])   # W[canary feature, class 0]: untouched by real clients
    clip = float(p.get("clip", 1.0))
    size = float(p.get("canary", 10.0)) * clip      # the canary update's norm before clipping
    active = np.ones(eng.R, dtype=bool)
    if s.canary == "zero-out":
        # client 0 takes part either way; the adversary sees its noised
        # update when it does, and that it did
        c = rel.select(active)
        upd = pol.local_updates(glob, c)
        upd[c.client == 0] = 0.0
        if world == "in":
            upd[c.client == 0, k] = size
        noisy, _ = rel.privatise(rel.clip_updates(upd, c), c)
        proj = np.full(eng.R, -np.inf)
        first = c.client == 0
        proj[c.replica[first].cpu().numpy()] = noisy[first, k].cpu().numpy()
        return {"projection": proj}
    N = eng.N
    present = np.ones(N, dtype=bool)
    if world == "out" and s.canary in ("add-remove", "witness-add-remove"):
        present[0] = False                        # add/remove neighbours: absent, not silent
    c = rel.select(active, present=present)
    if s.canary.startswith("witness"):            # every client sends a = C u; the canary client -a
        upd = torch.zeros(c.size, eng.net.n_params, dtype=eng.dtype, device=eng.device)
        upd[:, k] = clip
        if world == "in":
            upd[c.client == 0, k] = -size         # 10 C before clipping: -a after
    else:
        upd = pol.local_updates(glob, c)
        upd[c.client == 0] = 0.0
        upd[c.client == 0, k] = size             # 10 C before clipping (only present in the "in" world)
        if world == "out" and s.canary == "zero-out-sum":
            upd[c.client == 0] = 0.0             # zero-out: client 0 takes part, sending nothing
    new = rel.release(glob, upd, c, active)
    release = _flat_release(eng, new, glob)
    scores = {"projection": release[:, k].cpu().numpy(), "norm": release.pow(2).sum(1).cpu().numpy()}
    if getattr(rel, "adaptive", False):
        scores.update(_adaptive_scores(pol, release, k, clip))
    return scores


def _scores_sample(s: AuditSetting, world, replicas, first_seed, broken):
    p = s.params
    label = 0
    ds = _synthetic(p["samples"], 12345, p["features"], canary_label=label if world == "in" else None)
    # the client's declared size is the same public number in both worlds;
    # the broken copy divides by its own data's count instead
    pol = _policy(s, ds, 1, replicas, first_seed, broken, sizes=None if broken == "private-divisor" else [p["samples"]])
    eng = pol.engine
    glob = _initial(eng, p["features"])
    col = _canary_column(glob, p["features"])
    # the canary's gradient on its own weights is (p - e_y) x_c: its direction
    # from each replica's initial model (the auditor knows the model it sent)
    xc = torch.zeros(eng.R, 1, 1, 1, p["features"] + 1)
    xc[..., p["features"]] = _BIG
    prob = torch.softmax(eng.net.forward(glob, xc)[:, 0], -1)
    v = prob - torch.nn.functional.one_hot(torch.tensor(label), _CLASSES).to(prob)
    v = v / v.norm(dim=1, keepdim=True)
    new = pol.round(0, glob, np.ones(eng.R, dtype=bool))
    release = _flat_release(eng, new, glob)
    return {"projection": -(release[:, col] * v).sum(1).cpu().numpy(), "norm": release.pow(2).sum(1).cpu().numpy()}


def _scores_nbafl(s: AuditSetting, world, replicas, first_seed, broken):
    p = s.params
    label = 0
    ds = _synthetic(p["samples"], 12345, p["features"], canary_label=label if world == "in" else None, replace=True)
    pol = _policy(s, ds, 1, replicas, first_seed, broken)
    eng = pol.engine
    glob = _initial(eng, p["features"])
    k = int(_canary_column(glob, p["features"])[label])
    new = pol.round(0, glob, np.ones(eng.R, dtype=bool))
    return {"projection": Engine.flat(new)[:, k].cpu().numpy()}


def _scores_run(s: AuditSetting, world, replicas, first_seed, broken):
    """The whole run of a mechanism whose noise spans the rounds (BandMF):
    T rounds, client 0 present (sending the canary, 10 C in its own
    coordinate, whenever it is selected) or absent; the other clients send
    nothing in that coordinate.  What the adversary sees is the T released
    sums' canary coordinate x (R, T); with C the strategy, Cx carries white
    noise, so the scores are projections of Cx onto C e_π (e_π: the canary
    group's rounds; the likelihood ratio of the real mechanism), onto C 1
    (a client in every round), and x summed over π (the test of independent
    noise), and the squared norm."""
    from ..theory.bandmf import strategy

    p = s.params
    ds = _synthetic(p["samples"] * p["clients"], 12345, p["features"])
    pol = _policy(s, ds, p["clients"], replicas, first_seed, broken)
    eng, rel = pol.engine, pol.release
    glob = _initial(eng, p["features"])
    k = int(_canary_column(glob, p["features"])[0])
    size = float(p.get("canary", 10.0)) * float(p.get("clip", 1.0))
    active = np.ones(eng.R, dtype=bool)
    present = np.ones(eng.N, dtype=bool)
    present[0] = world == "in"
    T, b = int(p["rounds"]), int(p["bands"])
    x = np.zeros((eng.R, T))
    norm = np.zeros(eng.R)
    for t in range(T):
        c = rel.select(active, present=present)
        upd = torch.zeros(c.size, eng.net.n_params, dtype=eng.dtype, device=eng.device)
        upd[c.client == 0, k] = size
        release = _flat_release(eng, rel.release(glob, upd, c, active), glob)
        x[:, t] = release[:, k].cpu().numpy()
        norm += release.pow(2).sum(1).cpu().numpy()
    C = strategy(T, b)
    e_pi = (np.arange(T) % b == 0).astype(float)
    cx = x @ C.T
    return {"projection": cx @ (C @ e_pi), "every-round": cx @ (C @ np.ones(T)), "rounds": x @ e_pi, "norm": norm}


#: seeds of the pipeline's training runs: apart from its pre-trial's (a broken pre-trial's seeded runs must not
#: share their draws with the training too: the break is the pre-trial's own)
_TRAINING_SEEDS = 25 * 10**6


def _pipeline(s: AuditSetting, replicas, first_seed, broken="none"):
    """The pipeline of ``s`` over ``replicas`` audit runs: the private
    pre-trial's runs as its sweep assembles them
    (:func:`paretofl.fl.build.assemble_pretrial`; one replica per noise
    level at one seed per audit run, the seed ``first_seed + i``) and the
    training after it (:func:`paretofl.fl.build.assemble`).  ``broken``
    "shared-noise": the pre-trial as it ran before issue 44, its runs
    seeded from their seed, so that runs at one seed share every draw."""
    p = s.params
    ds = _synthetic(p["samples"] * p["clients"], 12345, p["features"])
    setup = _setup(ds, p["clients"])
    factor = 0.1 if broken == "noise/10" else 1.0
    opts = dict(clip=p.get("clip", 1.0), lr=p.get("lr", 0.1), batch_size=64)
    runs = [(sg * factor, first_seed + i) for i in range(replicas) for sg in p["sigmas"]]
    pre = _break_engine(assemble_pretrial(setup, p["q"], runs, private=broken != "shared-noise", mechanism=s.mechanism,
                                          budget=Budget(delta=p["delta"]), **opts).policy, broken)
    seeds = range(first_seed + _TRAINING_SEEDS, first_seed + _TRAINING_SEEDS + replicas)
    train = _break_engine(assemble(setup, "dpfedavg", seeds, budget=Budget(delta=p["delta"]), mechanism=s.mechanism,
                                   sigma=p["sigma"] * factor, client_rate=p["q"], **opts).policy, broken)
    return pre, train


def _released(pol, world, rounds, features, size):
    """The canary coordinate of ``rounds`` releases of ``pol``'s release,
    (R, rounds): client 0 present (sending ``size`` in the canary
    coordinate, nothing else) or absent; the other clients send nothing."""
    eng, rel = pol.engine, pol.release
    glob = _initial(eng, features)
    k = int(_canary_column(glob, features)[0])
    active = np.ones(eng.R, dtype=bool)
    present = np.ones(eng.N, dtype=bool)
    present[0] = world == "in"
    x = np.zeros((eng.R, rounds))
    for t in range(rounds):
        c = rel.select(active, present=present)
        upd = torch.zeros(c.size, eng.net.n_params, dtype=eng.dtype, device=eng.device)
        upd[c.client == 0, k] = size
        x[:, t] = _flat_release(eng, rel.release(glob, upd, c, active), glob)[:, k].cpu().numpy()
    return x


def pipeline_release(s: AuditSetting | str, world, replicas, first_seed=1, broken="none"):
    """What the adversary sees of ``replicas`` releases of the pipeline of
    ``s`` (a private pre-trial, then the training), in the canary's units
    (its clipped update C over the expected cohort m: a release is
    1[canary] + z·noise there): the pre-trial's runs (R, K, T_pre), the
    training's (R, T), and the noise multipliers z of the K runs and of the
    training (public numbers: the spec's and the design's)."""
    s = audit_setting(s) if isinstance(s, str) else s
    p = s.params
    pre, train = _pipeline(s, replicas, first_seed, broken)
    clip = float(p.get("clip", 1.0))
    size = float(p.get("canary", 10.0)) * clip
    unit = clip / float(pre.release.cohort[0])
    K = len(p["sigmas"])
    x = _released(pre, world, int(p["pretrial_rounds"]), p["features"], size).reshape(replicas, K, -1) / unit
    u = _released(train, world, int(p["rounds"]), p["features"], size) / unit
    mech = REGISTRY[s.mechanism]()
    z = np.array([float(mech.charge(p["q"], sg, p["clients"]).noise_multiplier) for sg in p["sigmas"]])
    return x, u, z, float(mech.charge(p["q"], p["sigma"], p["clients"]).noise_multiplier)


def recovered(x, z):
    """The recovery attack of issue 44 on a pre-trial's runs x (R, K, T):
    A = (z_j y_0 − z_0 y_j)/(z_j − z_0) from runs 0 and j, for every j > 0
    and round, (R, K − 1, T).  Runs that share their noise W (y_k = A +
    z_k W) give back the noiseless A exactly, whichever pair."""
    return np.stack([(z[j] * x[:, 0] - z[0] * x[:, j]) / (z[j] - z[0]) for j in range(1, len(z))], axis=1)


def _scores_pipeline(s: AuditSetting, world, replicas, first_seed, broken):
    """The pipeline (docs/theory.md §5.5): a private pre-trial's K runs and
    the training after it, every release one output, client 0 present or
    absent.  The scores: the likelihood ratio of the real pipeline (each
    release 1[canary] + z·N(0, 1), independent: Σ x/z²), the recovery
    attack's A averaged over its pairs and rounds (exactly 1[canary] where
    the runs share their noise), and the pre-trial's and the training's
    likelihood ratios alone."""
    x, u, z, zt = pipeline_release(s, world, replicas, first_seed, broken)
    pre = (x / z[None, :, None] ** 2).sum((1, 2))
    training = u.sum(1) / zt ** 2
    return {"projection": pre + training, "recovered": recovered(x, z).mean((1, 2)), "pretrial": pre,
            "training": training}


def _pipeline_claim(s: AuditSetting, broken="none") -> float:
    """The ε the trainer reports for the training after the pre-trial:
    :func:`paretofl.fl.algorithms.train` with the pre-trial's charges
    ``spent`` (as ``train --design`` starts every ledger with them): each
    pre-trial run's own charges, every round of it, composed with the
    training's.  "pretrial-uncharged": the training's alone."""
    from .algorithms import train as run

    p = s.params
    pre, train = _pipeline(s, 1, 0)
    K = len(p["sigmas"])
    spent = () if broken == "pretrial-uncharged" else tuple(
        ch.at(k) for t in range(int(p["pretrial_rounds"])) for ch in pre.charges(t) for k in range(K))
    _, _, final = run(train, rounds=int(p["rounds"]), delta=p["delta"], spent=spent)
    return float(final["epsilon"][0])


_RUNNERS = {"add-remove": _scores_client, "zero-out": _scores_client, "zero-out-sum": _scores_client,
            "witness-add-remove": _scores_client,
            "witness-replace": _scores_client, "sample-add": _scores_sample, "sample-replace": _scores_nbafl,
            "add-remove-run": _scores_run, "add-remove-pipeline": _scores_pipeline}


def claimed_epsilon(s: AuditSetting | str, broken: str = "none") -> float:
    """The ε the trainer reports for one round of the mechanism of ``s``: the
    policy's own charge on the trainer's ledger (the canary client's group's
    row), or NbAFL's guaranteed ε.  A break in the claim gives the ε
    computed the broken way instead."""
    s = audit_setting(s) if isinstance(s, str) else s
    p = s.params
    delta = p.get("delta", 1e-5)
    if s.canary == "add-remove-pipeline":
        return _pipeline_claim(s, broken)
    if broken == "amplified-claim":     # the local view charged as the aggregate view's subsampled Gaussian
        return Charge("poisson", p["q"], p["sigma"]).epsilon(delta)
    if broken in ("charged-at-z", "charged-as-before"):   # the sum's z, as if the sensitivity were C
        q = p["cohort"] / p["clients"]
        z = get_mechanism(s.mechanism).noise(q, p["sigma"], p["clients"], cohort=p["cohort"]).std   # on the sum
        return Charge("fixed-size" if broken == "charged-at-z" else "none", q, z).epsilon(delta)
    n = p["samples"] * (1 if s.canary in ("sample-add", "sample-replace") else p["clients"])
    pol = _policy(s, _synthetic(n, 12345, p["features"]), p["clients"], 1, 0)
    if pol.fixed_epsilon() is not None:
        return float(pol.fixed_epsilon())
    ledger = pol.ledger(pol.n_groups, delta)
    for t in range(int(p.get("rounds", 1))):    # the run's rounds (one, but for a run-long audit)
        ch = pol.charges(t)
        ledger.commit(ch, ledger.increment(ch), np.ones(pol.n_groups, dtype=bool))
        if hasattr(pol.release, "t"):
            pol.release.t += 1
    return float(ledger.epsilon()[p["group_of"][0] if "group_of" in p else 0])


@dataclass
class AuditResult:
    setting: str
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
        return {"setting": self.setting, "mechanism": self.mechanism, "epsilon_claimed": self.epsilon_claimed,
                "epsilon_lower": self.epsilon_lower, "runs": self.runs, "broken": self.broken,
                "delta": self.delta, "violated": self.violated, **self.details}


def audit(setting: str, runs: int = 20000, broken: str = "none", chunk: int = 5000, seed: int = 0,
          progress=None) -> AuditResult:
    """Audit one setting (:func:`paretofl.mechanisms.audit_settings`; a
    mechanism's name means its first) with ``runs`` releases, half with the
    canary.  ``broken`` (one of the setting's :func:`breaks_for`) audits a
    broken copy against the unbroken mechanism's claimed ε, or the real
    release against a broken claim.  ``progress(n)`` is called after each
    chunk with the n runs it added (a progress bar's update)."""
    names = [x.name for x in audit_settings()]
    if setting not in names:
        own = audit_settings(setting)
        if not own:
            raise ValueError(f"unknown mechanism or audit setting {setting!r}; choose from {', '.join(names)}")
        setting = own[0].name
    s = audit_setting(setting)
    if broken != "none" and broken not in breaks_for(setting):
        raise ValueError(f"unknown break {broken!r} for {setting}; choose from "
                         f"{', '.join(['none', *breaks_for(setting)])}")
    if isinstance(runs, bool) or not (isinstance(runs, (int, np.integer)) and 200 <= runs <= 10**7):
        raise ValueError(f"runs must be an integer in [200, 10^7], got {runs!r}")
    run = _RUNNERS[s.canary]
    claim_break = next((b for b in s.breaks if b.name == broken and b.claim), None)
    mech_break = "none" if claim_break is not None else broken
    half = runs // 2
    scores = {"out": [], "in": []}
    base = 1 + seed * 10**8
    for w, world in enumerate(("out", "in")):
        for start in range(0, half, chunk):
            n = min(chunk, half - start)
            scores[world].append(run(s, world, n, base + w * 5 * 10**7 + start, mech_break))
            if progress is not None:
                progress(n)
    s_out = {k: np.concatenate([c[k] for c in scores["out"]]) for k in scores["out"][0]}
    s_in = {k: np.concatenate([c[k] for c in scores["in"]]) for k in scores["in"][0]}
    delta = s.params.get("delta", 1e-5)
    eps, info = epsilon_lower_bound(s_out, s_in, delta, seed=seed)
    if s.params.get("calibration") == "paper":
        info["epsilon_paper"] = s.params["epsilon"]
    return AuditResult(setting, s.mechanism, broken, claimed_epsilon(s, broken), eps, 2 * half, delta, info)


__all__ = ["AuditResult", "audit", "breaks_for", "settings_of", "claimed_epsilon", "epsilon_lower_bound",
           "clopper_pearson_upper"]
