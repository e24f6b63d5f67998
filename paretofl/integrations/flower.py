"""Apply a design in Flower (``pip install 'paretofl[flower]'``).

What Flower does, and what paretofl charges for it (docs/theory.md §5.1):

* *Sampling.* FedAvg samples a fixed number m of the N clients each round,
  uniformly without replacement (``fraction_fit`` and ``min_fit_clients``
  through the client manager) — not Poisson with rate q.  paretofl accounts
  for that with the fixed-size bound of Wang, Balle and Kasiviswanathan
  (2019, Theorem 27), whose neighbours *replace* one client (N public).
* *Noise.* Flower's central-DP wrappers clip each client's update to C and
  add N(0, (z·C/m)²) per coordinate to the mean of the m updates — noise
  multiplier z on their sum.  Replacing a client moves the sum by up to 2C,
  so each round is charged a Gaussian of noise multiplier z/2.
* *What paretofl maps.* A design made with ``framework="flower"`` has
  q = m/N; Flower's ``noise_multiplier`` is the design's noise multiplier
  on the sum, z = σ√m, which is the noise paretofl's own trainer puts on the
  same sum (the mean then carries σC/√m either way).
* *Weights.* FedAvg weights updates by the clients' reported example counts;
  the noise is calibrated for an equal-weight mean, so :func:`strategy`
  averages with equal weights (``equal_weight_fedavg()``).
* *Evaluation.* Federated evaluation sends client metrics computed on
  private data to the server unprotected: :func:`strategy` turns it off
  (``fraction_evaluate=0``); evaluate centrally on public data
  (``evaluate_fn``).

Flower's own accountant (flwr >= 1.41, ``flwr.serverapp``): its accounted
fixed-clipping wrappers accept only ``sampling_method="no-amplification"``
with add/remove neighbours, and charge each round a Gaussian of the
strategy's noise multiplier z: sensitivity C on the sum.  That holds only
when every client takes part (m = N).  With a fixed m < N, a client added
to the population can displace one that would have been sampled, so the
sum moves by up to 2C and the round is a Gaussian of z/2 (docs/theory.md
§5.1); Flower's accountant, fed z, under-reports ε then (by up to half).
:func:`accountant` therefore builds Flower's accountant charging what the
release is: each event at z where m = N, at z/2 where m < N
(``max_epsilon`` = the design's budget).  A design for it is made with
``framework="flower-accounted"``, which charges the same, and
:func:`accounted_strategy` builds the Message-API strategy around the
accountant, so that Flower's reported ε, its ``max_epsilon`` and
``PrivacyBudgetExhausted`` enforce the design's budget.  Two mistakes this bridge rules out: a q < 1
design made for sampling without replacement ("flower") shows a larger ε
under Flower's accountant, which then stops it early; and Flower's
replace-one accountant given the strategy's z as it is understates ε (the
replace-one sensitivity is 2C: it would need z/2).

Flower's adaptive-clipping wrappers (``DifferentialPrivacy*AdaptiveClipping``
in flwr 1.41) differ from Andrew et al. (2021), whose update paretofl's
trainer runs (``clip_quantile``): they count the updates that were
*clipped* and step C <- C·exp(-η(fraction clipped - γ)), which moves C away
from the target quantile; they noise the sum with the C just updated, not
the C the updates were clipped to (below the charge when C shrinks); and
their raw count moves by 1 when a client is added, where the joint
multiplier (z⁻² - (2σ_b)⁻²)^(-1/2) they use assumes ½.  paretofl exports no
design to them (tests/test_recipe.py shows the first two).

Flower is imported only inside the functions that build its objects.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ..mechanisms import get as mechanism_of
from ..mechanisms import names
from ..recommendation import Design
from ..theory.privacy import check_delta
from . import FLOWER, checked, claim_holds

__all__ = ["FlowerPlan", "plan", "strategy", "flower_epsilon", "equal_weight_fedavg", "snippet", "accountant",
           "accounted_strategy"]


def flower_epsilon(num_clients: int, num_sampled_clients: int, noise_multiplier: float, rounds: int,
                   delta: float = 1e-5) -> float:
    """ε of ``rounds`` rounds of Flower's central DP: m of N clients drawn
    without replacement, noise multiplier z on the sum of updates clipped to
    C (replace-one neighbours: sensitivity 2C, so z/2 is charged)."""
    p = FlowerPlan(num_clients, num_sampled_clients, rounds, noise_multiplier, 1.0, math.inf, delta)  # checks them
    return _spent(p.num_clients, p.num_sampled_clients, noise_multiplier, p.num_rounds, delta, accounted=False)


def _spent(n: int, m: int, z: float, rounds: int, delta: float, accounted: bool) -> float:
    """ε of ``rounds`` rounds of m of n clients at Flower's noise multiplier z, by the mechanism Flower runs
    (``accounted``: the one whose accountant is Flower's own)."""
    (name,) = names(framework=FLOWER, accounted_outside=bool(accounted))
    mech = mechanism_of(name)
    sigma = mech.sigma_for(z, m / n, n, cohort=m)     # the σ whose noise() on the sum is z
    return float(mech.epsilon(m / n, sigma, rounds, delta, n))


@dataclass(frozen=True)   # a plan is checked where it is made, and stays as checked
class FlowerPlan:
    """A design in Flower's terms."""

    num_clients: int
    num_sampled_clients: int
    num_rounds: int
    noise_multiplier: float
    clipping_norm: float
    epsilon: float
    delta: float
    accounted: bool = False    # made for Flower's own accountant (framework="flower-accounted")
    budget: float | None = None
    # what each client's own training (the ClientApp) runs each round: the design's recipe, where it has one
    local_epochs: int | None = None
    learning_rate: float | None = None
    batch_size: int | None = None

    def __post_init__(self):
        """A plan is checked where it is made: whole numbers of clients and
        rounds, the cohort within the population, positive noise and C, and
        δ below 1/N (the guarantee is the clients')."""
        for name in ("num_clients", "num_sampled_clients", "num_rounds"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if self.num_sampled_clients > self.num_clients:
            raise ValueError(f"num_sampled_clients must lie in 1..num_clients ({self.num_clients}), got "
                             f"{self.num_sampled_clients}")
        for name in ("noise_multiplier", "clipping_norm"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.floating)) or not (v > 0) or math.isinf(v):
                raise ValueError(f"{name} must be a positive finite number, got {v!r}")
        check_delta(self.delta, self.num_clients)
        if self.budget is not None and (not (self.budget > 0) or math.isinf(self.budget)):
            raise ValueError(f"budget must be a positive finite number, got {self.budget!r}")
        for name in ("local_epochs", "batch_size"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1):
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        v = self.learning_rate
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf):
            raise ValueError(f"learning_rate must be a positive finite number, got {v!r}")
        # its epsilon is what its rounds and noise spend, or more (a plan is never believed: re-derived)
        claim_holds("this Flower plan", self.epsilon, _spent(self.num_clients, self.num_sampled_clients,
                                                             float(self.noise_multiplier), self.num_rounds,
                                                             self.delta, self.accounted), self.budget)

    @property
    def fraction_fit(self) -> float:
        return self.num_sampled_clients / self.num_clients

    @property
    def noise_std_on_mean(self) -> float:
        """The std Flower adds per coordinate to the mean of the m updates."""
        return self.noise_multiplier * self.clipping_norm / self.num_sampled_clients

    def to_dict(self) -> dict:
        return {**asdict(self), "fraction_fit": self.fraction_fit, "noise_std_on_mean": self.noise_std_on_mean}


def plan(design: Design, clipping_norm: float | None = None) -> FlowerPlan:
    """Flower's parameters for ``design`` (made with ``framework="flower"``,
    the ``client-aggregate`` mechanism) and a clipping norm C."""
    design = checked(design)
    if mechanism_of(design.mechanism).framework != FLOWER:
        raise ValueError("this design was not made for Flower's sampling: design it again for Flower (framework "
                         "flower, or flower-accounted for Flower's own accountant)")
    if clipping_norm is None:
        clipping_norm = design.clip
    if clipping_norm is None or not (clipping_norm > 0) or math.isinf(clipping_norm):
        raise ValueError(f"clipping_norm must be a positive finite number, got {clipping_norm}")
    m = int(round(design.q * design.n_clients))
    return FlowerPlan(num_clients=design.n_clients, num_sampled_clients=m, num_rounds=design.rounds,
                      noise_multiplier=design.noise_multiplier, clipping_norm=float(clipping_norm),
                      epsilon=design.epsilon, delta=design.delta,
                      accounted=mechanism_of(design.mechanism).accounted_outside,
                      budget=design.budget, local_epochs=design.local_epochs, learning_rate=design.lr,
                      batch_size=design.batch_size)


_EQUAL = None


def _fedavg_class():
    global _EQUAL
    if _EQUAL is not None:
        return _EQUAL
    from flwr.server.strategy import FedAvg

    class EqualWeightFedAvg(FedAvg):
        """FedAvg averaging the (clipped) updates with equal weights, the
        mean Flower's DP noise is calibrated for (its plain FedAvg weights by
        the example counts clients report)."""

        def aggregate_fit(self, server_round, results, failures):
            for _, res in results:
                res.num_examples = 1
            return super().aggregate_fit(server_round, results, failures)

    _EQUAL = EqualWeightFedAvg
    return _EQUAL


def equal_weight_fedavg():
    """The class :class:`EqualWeightFedAvg` (built on first use: Flower is
    imported then)."""
    return _fedavg_class()


def strategy(design_or_plan, clipping_norm: float | None = None, side: str = "server", **fedavg_kwargs):
    """The Flower strategy that runs ``design``: equal-weight FedAvg sampling
    m of N clients, wrapped in Flower's fixed-clipping DP strategy
    (``side="server"``: the server clips; ``"client"``: the clients clip,
    and each ClientApp needs ``flwr.client.mod.fixedclipping_mod``).
    ``fedavg_kwargs`` go to FedAvg (``evaluate_fn``, ``initial_parameters``,
    ...); federated evaluation is off unless you turn it on."""
    from flwr.server.strategy import (
        DifferentialPrivacyClientSideFixedClipping,
        DifferentialPrivacyServerSideFixedClipping,
    )

    p = design_or_plan if isinstance(design_or_plan, FlowerPlan) else plan(design_or_plan, clipping_norm)
    if p.accounted:
        raise ValueError("this plan is for Flower's own accountant: build it with accounted_strategy(plan)")
    if side not in ("server", "client"):
        raise ValueError(f"side must be 'server' or 'client', got {side!r}")
    sampling = {"fraction_fit": p.fraction_fit, "min_fit_clients": p.num_sampled_clients,
                "min_available_clients": p.num_clients}
    _keeps_sampling(fedavg_kwargs, sampling)
    kw = {**sampling, "fraction_evaluate": 0.0, "min_evaluate_clients": 0, **fedavg_kwargs}
    base = _fedavg_class()(**kw)
    wrap = (DifferentialPrivacyServerSideFixedClipping if side == "server"
            else DifferentialPrivacyClientSideFixedClipping)
    return wrap(base, noise_multiplier=p.noise_multiplier, clipping_norm=p.clipping_norm,
                num_sampled_clients=p.num_sampled_clients)


def _keeps_sampling(fedavg_kwargs: dict, sampling: dict) -> None:
    """FedAvg's sampling is the plan's: m of N clients a round is what its noise is divided among and what its ε
    is charged for, so a keyword that sets it otherwise (10 clients a round where the plan's noise is for 100
    spends 196 where the plan says 2) is refused in one line."""
    clash = sorted(k for k in fedavg_kwargs if k in sampling)
    if clash:
        raise ValueError(f"{', '.join(clash)} set(s) how many clients train a round, which the plan fixes (m = "
                         f"{sampling.get('min_fit_clients', sampling.get('min_train_nodes'))} of N): its noise and "
                         "epsilon are for that cohort; design again for another")


def _client_recipe(p: FlowerPlan) -> list[str]:
    """What the ClientApp must train each round (the design's recipe: its local epochs were chosen with T)."""
    said = [f"{k}={v!r}" for k, v in (("local_epochs", p.local_epochs), ("learning_rate", p.learning_rate),
                                       ("batch_size", p.batch_size)) if v is not None]
    return [f"# each client's training (your ClientApp) runs, each round: {', '.join(said)} (the design's recipe)"] \
        if said else []


def snippet(p: FlowerPlan) -> str:
    """Python that builds this plan's strategy in a Flower ServerApp."""
    args = ", ".join(f"{k}={v!r}" for k, v in asdict(p).items())
    if p.accounted:
        return "\n".join(_client_recipe(p) + [
            "from flwr.serverapp import Grid, ServerApp",
            "from paretofl.integrations import flower",
            "",
            f"plan = flower.FlowerPlan({args})",
            "app = ServerApp()",
            "",
            "@app.main()",
            "def main(grid: Grid, context):",
            "    strategy = flower.accounted_strategy(plan)   # Flower's accountant, max_epsilon = the budget",
            "    strategy.start(grid=grid, initial_arrays=initial_arrays, num_rounds=plan.num_rounds)",
            "    print(strategy.privacy_spent())",
        ])
    return "\n".join(_client_recipe(p) + [
        "from flwr.server import ServerApp, ServerAppComponents, ServerConfig",
        "from paretofl.integrations import flower",
        "",
        f"plan = flower.FlowerPlan({args})",
        "strategy = flower.strategy(plan)   # add evaluate_fn=..., initial_parameters=... as for FedAvg",
        "app = ServerApp(server_fn=lambda context: ServerAppComponents(",
        "    strategy=strategy, config=ServerConfig(num_rounds=plan.num_rounds)))",
    ])


_DISPLACEMENT = None


def _displacement_accountant_class():
    """Flower's ``RdpAccountant`` charging each event a Gaussian of half its
    noise multiplier: what a round releases when a fixed m < N clients are
    drawn under add/remove neighbours (built on first use: Flower is
    imported then).  Only the public ``compose`` and ``would_exceed`` are
    overridden; the events it stores are the halved ones, so its
    ``state_dict`` restores the same ε."""
    global _DISPLACEMENT
    if _DISPLACEMENT is not None:
        return _DISPLACEMENT
    from flwr.supercore.privacy_accounting import GaussianPrivacyEvent
    from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant

    def halved(event):
        return GaussianPrivacyEvent(noise_multiplier=event.noise_multiplier / 2.0, sample_size=event.sample_size,
                                    population_size=event.population_size)

    class DisplacementRdpAccountant(RdpAccountant):
        """Add/remove neighbours with a fixed cohort of m < N: an added
        client can displace a sampled one, so the sum of updates clipped to
        C moves by up to 2C and each release is charged a Gaussian of z/2."""

        def compose(self, event, count=1):
            super().compose(halved(event), count)

        def would_exceed(self, event, max_epsilon=None, count=1):
            return super().would_exceed(halved(event), max_epsilon, count)

    _DISPLACEMENT = DisplacementRdpAccountant
    return _DISPLACEMENT


def accountant(p: FlowerPlan):
    """Flower's own RDP accountant for the plan: add/remove neighbours, no
    amplification, population N, the plan's δ, ``max_epsilon`` = the
    design's budget (Flower then raises ``PrivacyBudgetExhausted`` before a
    round that would pass it), each round charged what it releases: a
    Gaussian of the strategy's z when every client takes part, of z/2 when
    a fixed m < N is drawn (:class:`DisplacementRdpAccountant`)."""
    from flwr.supercore.privacy_accounting import NeighboringRelation, PrivacyConfig, SamplingMethod
    from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant

    if not p.accounted:
        raise ValueError("Flower's accountant cannot account this plan's sampling without replacement (it accepts "
                         "fixed clipping without amplification only): design with framework='flower-accounted'")
    cfg = PrivacyConfig(target_delta=p.delta, population_size=p.num_clients,
                        neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
                        sampling_method=SamplingMethod.NO_AMPLIFICATION,
                        max_epsilon=p.budget if p.budget else p.epsilon)
    cls = RdpAccountant if p.num_sampled_clients >= p.num_clients else _displacement_accountant_class()
    return cls(cfg)


def accounted_strategy(p: FlowerPlan, side: str = "server", **fedavg_kwargs):
    """The Message-API (``flwr.serverapp``) strategy that runs an accounted
    plan: FedAvg training exactly m of N nodes a round (``fraction_train``,
    ``min_train_nodes``), wrapped in Flower's fixed-clipping DP strategy with
    :func:`accountant` attached.  Flower's accounted mode averages with equal
    weights: each ClientApp must report the same ``num-examples`` (1, say).
    ``fedavg_kwargs`` go to ``flwr.serverapp.strategy.FedAvg``; federated
    evaluation is off unless you turn it on.  Run it with
    ``strategy.start(grid, initial_arrays, num_rounds=plan.num_rounds)``."""
    from flwr.serverapp.strategy import (
        DifferentialPrivacyClientSideFixedClipping,
        DifferentialPrivacyServerSideFixedClipping,
        FedAvg,
    )

    if not isinstance(p, FlowerPlan):
        raise ValueError("accounted_strategy needs a FlowerPlan (flower.plan(design, C))")
    if side not in ("server", "client"):
        raise ValueError(f"side must be 'server' or 'client', got {side!r}")
    acc = accountant(p)
    sampling = {"fraction_train": p.fraction_fit, "min_train_nodes": p.num_sampled_clients,
                "min_available_nodes": p.num_clients}
    _keeps_sampling(fedavg_kwargs, sampling)
    kw = {**sampling, "fraction_evaluate": 0.0, "min_evaluate_nodes": 0, **fedavg_kwargs}
    wrap = (DifferentialPrivacyServerSideFixedClipping if side == "server"
            else DifferentialPrivacyClientSideFixedClipping)
    return wrap(FedAvg(**kw), noise_multiplier=p.noise_multiplier, clipping_norm=p.clipping_norm,
                num_sampled_clients=p.num_sampled_clients, accountant=acc)
