"""``bandmf`` and ``bandmf-amplified``: DP-FTRL with banded matrix
factorization (Kairouz et al. 2021; Choquette-Choo et al. 2023,
"(Amplified) banded matrix factorization"; docs/theory.md §7), the noise
correlated across rounds.

The clients are split into b groups fixed in advance (client i in group
i mod b, a public schedule).  Round t's cohort comes from group t mod b, so
a client joins at most once in any b consecutive rounds:

* ``bandmf`` — every client of the group (a cohort of about N/b); nothing
  is sampled, so nothing is amplified: what a fleet that cannot sample its
  devices independently can run;
* ``bandmf-amplified`` — each client of the group with probability q_g
  (Poisson within the group; a cohort of q_g N/b on average).

Each update is clipped to C; the server sums them and adds row t of
C⁻¹Z, Z ~ N(0, z²C²) per coordinate and round, C the b-banded strategy of
:mod:`paretofl.theory.bandmf` (a recurrence over the last b − 1 draws); the
sum is divided by the expected cohort, a public number.  The whole run is
a post-processing of CG + Z.  A client joins at most k = ⌈T/b⌉ rounds, b
or more apart, whose columns of C are orthogonal with norm at most 1, so
adding or removing it moves CG by at most √k C: ``bandmf`` is charged k
Gaussians of noise multiplier z (Denisov et al. 2022, Theorem 2.1: the
same holds for adaptively chosen updates), ``bandmf-amplified`` k
Poisson-subsampled Gaussians of rate q_g and noise multiplier z
(Choquette-Choo et al. 2023, Theorem 4).  b = 1 is DP-FedAvg: every client
every round (``bandmf``), or Poisson sampling (``bandmf-amplified``).

In paretofl's units q = m/N is the share of the population in a round
(1/b for ``bandmf``; q_g/b for the amplified one), σ each client's noise
multiplier and z = σ√m, as for client-aggregate.
"""

from __future__ import annotations

import math

import numpy as np

from ..theory import bandmf as mf
from ..theory.privacy import Charge, check_rate, cohort_size
from .base import (
    NO_CLIP,
    NOISE_DIV10,
    AuditSetting,
    Break,
    InfeasibleBudget,
    Mechanism,
    Noise,
    on_floor,
    rates,
    register,
    sigmas,
    sum_multiplier,
    sum_noise,
)

__all__ = ["BandMF", "BandMFAmplified", "MAX_BANDED_ROUNDS"]

#: the most rounds a banded design searches (its error table costs O(T b))
MAX_BANDED_ROUNDS = 100_000


def _band_candidates(lo: int, hi: int, count: int = 16) -> list[int]:
    """Up to ``count`` band counts in [lo, hi], geometric, ends included."""
    if hi - lo + 1 <= count:
        return list(range(lo, hi + 1))
    return sorted({int(x) for x in np.round(np.geomspace(lo, hi, count))} | {lo, hi})

_EVERY_ROUND = Break("every-round", "the canary's client joins every round of the run, not once every b rounds, "
                                    "charged as if it joined once every b")
#: the audits run the whole run (the noise spans the rounds): b = 16 bands over T = 32 rounds, two clients a
#: group, the canary client in group 0 (k = 2 participations); at delta = 1e-3 (docs/theory.md §7)
_RUN = dict(bands=16, rounds=32, clients=32, q=1 / 16, sigma=2.0 / math.sqrt(2.0), delta=1e-3, features=2, samples=4)
_AMPLIFIED = dict(bands=4, rounds=8, clients=8, q=0.5 / 4, sigma=1.2, delta=1e-3, features=2, samples=4)


class _Banded(Mechanism):
    """What the two share: the groups, the strategy, the charge's count."""

    noise_on = "correlated-sum"
    split = "server"
    designable = True
    in_auto = True
    max_design_rounds = MAX_BANDED_ROUNDS
    options = ("local_epochs", "batch_size", "bands")
    constructor_options = ("bands",)
    option_flags = {"bands": ("int", "fix the bands b (default: searched)")}
    trusted = ("the server (or a secure aggregator), which sees the clipped updates and keeps the last b - 1 noise "
               "draws secret")
    released = ("every round's global model: the sum of the round's clipped updates plus row t of C^-1 Z (noise "
                "correlated across rounds, b-banded strategy C), divided by the expected cohort (all T models may "
                "be published)")

    def __init__(self, bands=1):
        if isinstance(bands, bool) or not isinstance(bands, (int, np.integer, float)) or bands != int(bands) \
                or not 1 <= bands <= mf.MAX_BANDS:
            raise ValueError(f"bands must be a whole number in [1, {mf.MAX_BANDS}], got {bands!r}")
        self.bands = int(bands)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(bands={self.bands})"

    def options_dict(self) -> dict:
        return {"bands": self.bands}

    @property
    def relation(self) -> str:
        return ("add/remove: one client added to or removed from the population, with all of its data; its group "
                f"(of the {self.bands}) is assigned by a public schedule that does not depend on the data")

    # ---------------------------------------------------------------- privacy
    def group_rate(self, q):
        """q_g = q·b, each client's rate within its group's rounds."""
        return np.asarray(q, dtype=float) * self.bands if np.ndim(q) else float(q) * self.bands

    def participations(self, rounds) -> int:
        return mf.participations(rounds, self.bands)

    def rounds_for(self, participations):
        return participations * self.bands

    def charged_in_round(self, t: int) -> bool:
        return int(t) % self.bands == 0

    def who_joins(self, group_rate, of: str = "the group") -> str:
        """Who of a round's group takes part, in words (every one: bandmf)."""
        return f"every client of {of}"

    def error_ratio(self, rounds):
        if np.ndim(rounds):
            r = np.asarray(rounds, dtype=int)
            return mf.error_ratios(self.bands, int(r.max()))[r - 1]
        return mf.error_ratio(self.bands, int(rounds))

    def noise(self, q, sigma, n_clients, cohort=None) -> Noise:
        return sum_noise("correlated-sum", self.split, q, sigma, n_clients, cohort)

    def coefficients(self) -> list:
        """The strategy's band coefficients c_0..c_{b-1} (plain numbers)."""
        return [float(x) for x in mf.coefficients(self.bands)]

    # ----------------------------------------------------------------- design
    def _band_counts(self, s, bands) -> list[int]:
        """The band counts the design searches: ``bands`` given (checked
        against the q allowed), or those the q range allows."""
        fixed = self.selection == "cyclic"
        q_lo = s.q if s.q is not None else (s.q_min if s.q_min is not None else 1.0 / s.n)
        q_hi = s.q if s.q is not None else s.q_max
        if bands is not None:
            b = type(self)(bands=bands).bands
            if fixed and not q_lo * (1 - 1e-9) <= 1 / b <= q_hi * (1 + 1e-9):
                raise ValueError(f"bandmf with b = {b} takes 1/b = {1 / b:.4g} of the clients a round, outside "
                                 f"the q allowed [{q_lo:g}, {q_hi:g}]")
            if not fixed and q_lo > 1 / b * (1 + 1e-9):
                raise ValueError(f"bandmf-amplified with b = {b} samples within groups of 1/b of the clients: a "
                                 f"share of at most {1 / b:.4g} a round, below the q asked ({q_lo:g}); lower the "
                                 "bands or q")
            return [b]
        if fixed:                     # b groups, all of a group a round: q = 1/b within [q_lo, q_hi]
            lo, hi = math.ceil(1 / q_hi - 1e-9), min(math.floor(1 / q_lo + 1e-9), s.n, mf.MAX_BANDS)
            if s.q is not None:
                lo = hi = round(1 / s.q)
                if abs(lo * s.q - 1) > 1e-9:
                    raise ValueError(f"bandmf takes every client of one of b groups a round, so q = 1/b: q = "
                                     f"{s.q:g} is not one over a whole number")
            if lo > hi:
                raise ValueError(f"no band count b gives bandmf's share a round 1/b within [{q_lo:g}, {q_hi:g}]")
            return _band_candidates(lo, hi)
        hi = min(math.floor(1 / q_lo + 1e-9), s.t_cap, mf.MAX_BANDS)   # Poisson within the group: q b <= 1
        return _band_candidates(1, max(hi, 1))

    def search(self, s, given: dict):
        """The best design of the family (docs/theory.md §7): the exact search
        at each band count b (``bands`` given: that one; else those the q
        range allows: ``bandmf`` takes q = 1/b, ``bandmf-amplified`` samples
        within the group, q·b <= 1), the lowest bound kept; with
        ``s.compare``, Poisson DP-FedAvg's design for the same job beside it."""
        fixed = self.selection == "cyclic"
        if s.t_cap > self.max_design_rounds:
            raise ValueError(f"{self.name} designs search at most {self.max_design_rounds:,} rounds, got a cap of "
                             f"{s.t_cap:,}")
        bands = given.get("bands")
        bs = self._band_counts(s, bands)
        q_lo = s.q if s.q is not None else (s.q_min if s.q_min is not None else 1.0 / s.n)
        q_hi = s.q if s.q is not None else s.q_max
        found, errors, cohorts = {}, [], {}
        for b in bs:
            if fixed:
                cohorts[b] = [1.0 / b]
                continue
            top = min(q_hi, 1.0 / b)
            if top >= q_lo and top * s.n >= 1 - 1e-9:
                qs = [s.q] if s.q is not None else s.cohorts(top)
                if len(qs) > 8:           # eight cohort sizes a band count, geometric, ends kept
                    qs = [qs[i] for i in sorted({int(round(x)) for x in np.linspace(0, len(qs) - 1, 8)})]
                cohorts[b] = qs

        def at(b, qs):
            try:
                found[b] = s.point(type(self)(bands=b), qs)
            except InfeasibleBudget as exc:
                errors.append(exc)

        if fixed:
            for b in cohorts:
                at(b, cohorts[b])
        else:
            # each band count at its largest cohort first (where the bound is
            # usually least), then every cohort size at the two best counts
            for b in cohorts:
                at(b, cohorts[b][-1:])
            for b in sorted(found, key=lambda x: found[x].utility_bound)[:2]:
                if len(cohorts[b]) > 1:
                    at(b, cohorts[b])
            if not found:         # no count fits at its largest cohort: a smaller one spends less a round
                for b in cohorts:
                    if len(cohorts[b]) > 1:
                        at(b, cohorts[b])
        if not found:
            if errors:            # the least ε any count reached, and its way out
                raise min(errors, key=lambda e: e.min_epsilon)
            raise ValueError(f"no band count b fits the q range [{q_lo:g}, {q_hi:g}] for {self.name}")
        b = min(found, key=lambda x: (found[x].utility_bound, x))
        d = found[b]
        mech = type(self)(bands=b)
        r = float(mech.error_ratio(d.rounds))
        d.details = {"bands": b, **mech._figures(d), "cohort": d.cohort, "coefficients": mech.coefficients(),
                     "bands_searched": {str(x): found[x].utility_bound for x in sorted(found)},
                     "bands_from": "given" if bands is not None else
                     f"the exact search at each of {len(bs)} band counts in [{min(bs)}, {max(bs)}]: the lowest bound"}
        others = sorted((found[x].utility_bound, x) for x in found if x != b)
        if bands is None and len(bs) > 1:
            text = (f"b = {b} has the lowest utility bound of the {len(bs)} band counts searched in [{min(bs)}, "
                    f"{max(bs)}]")
            if others:
                text += (f"; the next best, b = {others[0][1]}, is {100 * (others[0][0] / d.utility_bound - 1):.1f} "
                         "% worse")
            d.notes.append(text)
        if b > 1:
            d.notes.append(f"the bound credits the correlated noise with cancelling in training as it does on the "
                           f"sums (r = {r:.3g}); measured on FashionMNIST (docs/results.md section 10) training kept "
                           "up to three times more of it, so this design may run more rounds with more noise than "
                           "the best")
        if s.compare:
            self._beside_dpfedavg(s, d)
        return d

    @staticmethod
    def _beside_dpfedavg(s, d) -> None:
        """Put the Poisson DP-FedAvg (client-aggregate) design for the same
        job beside a banded design: in its details, and a note."""
        from . import DEFAULT, get  # the registry imports this module

        try:
            other = s.point(get(DEFAULT))
        except ValueError as exc:                # InfeasibleBudget is one
            d.details["dpfedavg"] = {"error": str(exc)}
            return
        d.details["dpfedavg"] = {"mechanism": DEFAULT, **{k: getattr(other, k) for k in
                                                          ("q", "rounds", "sigma", "epsilon", "utility_bound")}}
        rel = 100 * (other.utility_bound / d.utility_bound - 1)
        verdict = f"{abs(rel):.1f} % {'above' if rel > 0 else 'below'} this design's"
        d.notes.append(f"the DP-FedAvg design with Poisson sampling (client-aggregate) for the same budget: q = "
                       f"{other.q:.4g}, T = {other.rounds}, sigma = {other.sigma:.4g}, utility bound "
                       f"{other.utility_bound:.4g} ({verdict}); it needs each client sampled independently"
                       + on_floor(other))

    def derived_details(self, d) -> dict:
        return self._figures(d) if "bands" in (d.details or {}) else {}

    def _figures(self, d) -> dict:
        """What a design at these bands carries: groups, participations, the error ratio, the group's rate."""
        return {"groups": self.bands, "participations": self.participations(d.rounds),
                "error_ratio": float(self.error_ratio(d.rounds)), "group_rate": float(self.group_rate(d.q)),
                "round_noise_factor": float(mf.round_noise_factors(self.bands, d.rounds).max())}

    def design_lines(self, d) -> list[str]:
        x = d.details
        if "bands" not in x:
            return []
        every = self.who_joins(x["group_rate"], of="it")
        return [f"  bands b             {x['bands']}  ({x['bands_from']})",
                f"  groups              {x['groups']}  (client i in group i mod b; round t takes {every})",
                f"  participations k    {x['participations']}  (ceil(T/b): the rounds one client joins at most, b "
                "apart)",
                f"  error ratio r       {x['error_ratio']:.4g}  (the correlated noise's error on the model, over "
                "independent noise's at the same z; 1 at b = 1)"]

    # -------------------------------------------------------------- statement
    def mechanism_text(self, d) -> str:
        clip = f"C = {d.clip:g}" if d.clip is not None else "C (the clipping norm: not chosen by this design)"
        return (f"updates clipped to L2 norm {clip}; the server adds to round t's sum row t of C^-1 Z, Z Gaussian "
                f"of std z C = {d.noise_multiplier:.4g} x C per coordinate and round, C the {self.bands}-banded "
                "Toeplitz strategy with coefficients binom(2k, k)/4^k scaled to unit norm (Fichtenberger et al. "
                "2023; the coefficients are in the design's details)")

    def statement_notes(self, d) -> list[str]:
        return [f"Participation: the guarantee assumes each client joins at most once in any {self.bands} "
                "consecutive rounds (its group's rounds, t mod b). A client that joins more often - a device "
                "enrolled twice, a group schedule not followed - breaks it: its columns of C overlap and its "
                "contribution is no longer bounded by sqrt(k) C."]


@register
class BandMF(_Banded):
    name = "bandmf"
    summary = "DP-FTRL with b-banded matrix factorization: groups in turn, every client of the group, no sampling"
    selection = "cyclic"
    audits = (
        AuditSetting("bandmf", "bandmf", "add-remove-run",
                     "b = 16 bands, T = 32 rounds (the whole run audited), 2 clients a group, z = 2; the canary "
                     "client in group 0 (k = 2); delta = 1e-3", dict(_RUN),
                     (NOISE_DIV10, NO_CLIP,
                      Break("independent-noise", "independent noise every round at z sqrt(r) - as small as the "
                                                 "error BandMF leaves on the model - charged as BandMF"),
                      _EVERY_ROUND)),
    )

    def check_rate(self, q, n_clients=None):
        q = check_rate(q, "q")
        if abs(q * self.bands - 1.0) > 1e-9:
            raise ValueError(f"bandmf takes every client of a group a round: client_rate (q, the share a round) "
                             f"must be 1/b = {1 / self.bands:.6g} with b = {self.bands}, not {q:g} (for a smaller "
                             "cohort use more bands, or bandmf-amplified)")
        return q

    def charge(self, q, sigma, n_clients=None, cohort=None) -> Charge:
        """A Gaussian of noise multiplier z per participation (no
        amplification); k = ⌈T/b⌉ of them over a run."""
        q, sigma = rates(q), sigmas(sigma)
        return Charge("none", 1.0, sum_multiplier(q, sigma, n_clients, cohort))

    def sampling_text(self, d) -> str:
        return (f"the clients are split into b = {self.bands} groups in advance (client i in group i mod b); round t "
                f"takes every client of group t mod b (about {d.clients_per_round:,} clients); who took part "
                "follows from the public schedule, and no amplification by sampling is claimed")

    def accountant_text(self, d) -> str:
        return (f"RDP of the Gaussian mechanism of noise multiplier z = {d.noise_multiplier:.4g}, composed over the "
                f"k = ceil(T/b) = {self.participations(d.rounds)} rounds a client joins (their columns of C are "
                "orthogonal: sensitivity sqrt(k) C; Denisov et al. 2022, Choquette-Choo et al. 2023)")


@register
class BandMFAmplified(_Banded):
    name = "bandmf-amplified"

    def who_joins(self, group_rate, of: str = "the group") -> str:
        return f"each client of {of} with probability {float(group_rate):.6g}"
    summary = "DP-FTRL with b-banded matrix factorization: groups in turn, Poisson sampling within the group"
    selection = "cyclic-poisson"
    audits = (
        AuditSetting("bandmf-amplified", "bandmf-amplified", "add-remove-run",
                     "b = 4 bands, T = 8 rounds (the whole run audited), 2 clients a group each sampled at 0.5, "
                     "z = 1.2; the canary client in group 0 (k = 2); delta = 1e-3", dict(_AMPLIFIED),
                     (NOISE_DIV10, NO_CLIP, _EVERY_ROUND)),
    )

    def check_rate(self, q, n_clients=None):
        q = check_rate(q, "q")
        if q * self.bands > 1.0 + 1e-9:
            raise ValueError(f"bandmf-amplified samples within a group of 1/b of the clients: q = {q:g} a round "
                             f"needs a rate {q * self.bands:g} > 1 within the group with b = {self.bands}; lower q "
                             "or the bands")
        if n_clients is not None and cohort_size(q, n_clients) < 1:
            raise ValueError(f"q = {q:g} of {int(n_clients)} clients selects fewer than one client a round on "
                             "average")
        return q

    def charge(self, q, sigma, n_clients=None, cohort=None) -> Charge:
        """A Poisson-subsampled Gaussian of rate q_g = q·b and noise
        multiplier z per eligible round; k = ⌈T/b⌉ of them over a run."""
        q, sigma = rates(q), sigmas(sigma)
        qg = self.group_rate(q)
        qg = np.minimum(qg, 1.0) if np.ndim(qg) else min(qg, 1.0)
        return Charge("poisson", qg, sum_multiplier(q, sigma, n_clients, cohort))

    def sampling_text(self, d) -> str:
        return (f"the clients are split into b = {self.bands} groups in advance (client i in group i mod b); in round "
                f"t each client of group t mod b joins independently with probability q_g = "
                f"{self.group_rate(d.q):.4g} (Poisson; about {d.clients_per_round:,.4g} clients); who took part is "
                "not released")

    def accountant_text(self, d) -> str:
        return (f"RDP of the Poisson-subsampled Gaussian of rate q_g = {self.group_rate(d.q):.4g} and noise "
                f"multiplier z = {d.noise_multiplier:.4g}, composed over the k = ceil(T/b) = "
                f"{self.participations(d.rounds)} rounds a client is eligible in (Choquette-Choo et al. 2023, "
                "amplified banded matrix factorization)")
