"""Apply a banded matrix factorization design (``bandmf``,
``bandmf-amplified``) where correlated noise is run: plain numbers, and a
snippet for JAX Privacy 2.0's matrix-factorization privatizer
(``pip install jax-privacy``; docs/theory.md §7).

What the design fixes, as numbers a framework takes:

* b, the bands, and the strategy's b coefficients c_0..c_{b-1}
  (binom(2k, k)/4^k scaled to unit norm; every column of C has norm at
  most 1);
* the groups: b of them, client i in group i mod b (any public assignment
  fixed before training does: the guarantee needs each client to join at
  most once in any b consecutive rounds); round t takes group t mod b, all
  of it (``bandmf``) or each client with probability q_g (amplified);
* z, the noise multiplier of Z, and its std z·C on the sum of the round's
  clipped updates; the sum is divided by the expected cohort m.

JAX Privacy's ``toeplitz.inverse_as_streaming_matrix(coef)`` is C⁻¹ for
these coefficients, the same recurrence paretofl's trainer runs (without
its ``column_normalize_for_n``, which would rescale the last columns and is
not what paretofl charged); ``noise_addition.matrix_factorization_privatizer``
adds its rows to a stream of sums.  JAX is imported by the snippet only.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ..mechanisms import get as mechanism_of
from ..recommendation import Design
from ..theory.privacy import check_delta
from . import checked, claim_holds

__all__ = ["BandMFPlan", "plan", "snippet"]


@dataclass(frozen=True)   # a plan is checked where it is made, and stays as checked
class BandMFPlan:
    """A banded design in plain numbers (see the module docstring)."""

    mechanism: str
    bands: int
    coefficients: list
    num_clients: int
    groups: int
    group_rate: float
    expected_cohort: float
    num_rounds: int
    participations: int
    noise_multiplier: float
    clipping_norm: float
    stddev: float
    epsilon: float
    delta: float

    def __post_init__(self):
        """A plan is never believed: what the snippet runs (the bands' coefficients, the noise's std z·C, the
        rounds, the group's rate) is its mechanism's, and its ε what those spend, or more
        (:func:`paretofl.integrations.claim_holds`)."""
        import numbers

        mech = mechanism_of(self.mechanism, bands=self.bands)     # a mechanism that is no banded one: refused there
        if mech.noise_on != "correlated-sum":
            raise ValueError(f"a BandMFPlan is of a banded mechanism, not {self.mechanism!r}")
        for k in ("num_clients", "num_rounds", "groups", "participations"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"a BandMFPlan's {k} must be an integer >= 1, got {v!r}")
        check_delta(self.delta, self.num_clients)               # the guarantee is the clients'
        nums = ("group_rate", "expected_cohort", "noise_multiplier", "clipping_norm", "stddev", "delta")
        if any(isinstance(getattr(self, k), bool) or not isinstance(getattr(self, k), numbers.Real)
               or not 0 < getattr(self, k) < math.inf for k in nums):
            raise ValueError(f"a BandMFPlan's {', '.join(nums)} must be positive finite numbers")
        q, n = self.group_rate / self.bands, self.num_clients
        mech.check_rate(q, n)
        wrong = [k for k, want in (("coefficients", mech.coefficients()), ("groups", self.bands),
                                   ("participations", mech.participations(self.num_rounds)))
                 if getattr(self, k) != want]
        wrong += [k for k, want in (("stddev", self.noise_multiplier * self.clipping_norm),
                                    ("expected_cohort", q * n)) if not math.isclose(getattr(self, k), want,
                                                                                    rel_tol=1e-9)]
        if wrong:
            raise ValueError(f"this BandMFPlan's {', '.join(wrong)}: not its mechanism's at its bands, rounds, "
                             "noise and rate: make the plan from a design (jax_privacy.plan)")
        sigma = mech.sigma_for(float(self.noise_multiplier), q, n)
        claim_holds("this BandMFPlan", self.epsilon, float(mech.epsilon(q, sigma, self.num_rounds, self.delta, n)))

    def to_dict(self) -> dict:
        return asdict(self)


def plan(d: Design, clip: float) -> BandMFPlan:
    """The plan of a ``bandmf`` or ``bandmf-amplified`` design at clipping norm ``clip``."""
    d = checked(d)
    mech = mechanism_of(d.mechanism, **(d.mechanism_options or {}))
    if mech.noise_on != "correlated-sum":
        raise ValueError(f"a {d.mechanism} design adds independent noise: export it to flower or opacus")
    if not (isinstance(clip, (int, float)) and clip > 0 and math.isfinite(clip)):
        raise ValueError(f"clip must be a positive finite number, got {clip!r}")
    z = float(d.noise_multiplier)
    return BandMFPlan(mechanism=d.mechanism, bands=mech.bands, coefficients=mech.coefficients(),
                      num_clients=d.n_clients, groups=mech.bands, group_rate=float(mech.group_rate(d.q)),
                      expected_cohort=float(d.cohort), num_rounds=d.rounds,
                      participations=mech.participations(d.rounds), noise_multiplier=z, clipping_norm=float(clip),
                      stddev=z * float(clip), epsilon=d.epsilon, delta=d.delta)


def snippet(p: BandMFPlan) -> str:
    """Python that runs the plan's noise with JAX Privacy 2.0."""
    sample = mechanism_of(p.mechanism).who_joins(p.group_rate, of="group t % b")
    return "\n".join([
        "import jax, jax.numpy as jnp",
        "from jax_privacy import noise_addition",
        "from jax_privacy.matrix_factorization import toeplitz",
        "",
        f"coef = jnp.array({[round(c, 12) for c in p.coefficients]!r})",
        "noising = toeplitz.inverse_as_streaming_matrix(coef)      # C^-1: the last b - 1 draws, as paretofl's",
        "privatizer = noise_addition.matrix_factorization_privatizer(",
        f"    noising, stddev={p.stddev!r}, prng_key=secret_seed)    # z C; your own secret seed",
        "state = privatizer.init(model_params)",
        f"for t in range({p.num_rounds}):",
        f"    cohort = ...                    # {sample} (b = {p.bands}; client i in group i % b)",
        f"    total = sum_of_updates_clipped_to(cohort, {p.clipping_norm!r})",
        "    noisy, state = privatizer.update(total, state)",
        f"    model_params = apply(model_params, noisy / {p.expected_cohort!r})   # divide by the expected cohort",
        f"# epsilon {p.epsilon:.4f} at delta {p.delta:g} if no client joins more than once every {p.bands} rounds",
    ])
