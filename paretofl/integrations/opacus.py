"""Sample-level DP-SGD inside each client, with Opacus (``pip install 'paretofl[train]'``).

A client running Opacus's ``make_private`` releases its update after
``local_steps`` DP-SGD steps a round: Poisson batches at rate q_b, each
per-sample gradient clipped to C, N(0, σ²C²) on the clipped sum, divided by
the expected batch (fixed when the loader is made: a public number).  Over
T rounds that is T·τ steps of the Poisson-subsampled Gaussian (docs/theory.md
§5.3, the ``sample`` mechanism; neighbours add or remove one of the client's
samples).  :func:`plan` calibrates σ so those steps meet a budget, with the
sample rate Opacus will really use: ``make_private`` sets q_b = 1/len(loader)
= 1/⌈n/B⌉, not B/n.  :func:`check` compares, after a run, the ε Opacus's own
accountant reports with paretofl's.

Opacus is imported only inside :func:`make_private` and :func:`check`.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass

from ..theory.privacy import Charge, account, check_delta
from . import claim_holds

#: the orders Opacus's RDP accountant uses (opacus.accountants.RDPAccountant.DEFAULT_ALPHAS)
OPACUS_ALPHAS = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)))


def _opacus_epsilon(z, q, steps, delta):
    """ε as Opacus's RDP accountant reports it: on its orders, unrefined, the same conversion (the
    searched ε is never above it)."""
    return account([Charge("poisson", q, z, steps)], delta, OPACUS_ALPHAS, fixed=True)

def _spent(z, q, steps, delta) -> float:
    """ε of ``steps`` DP-SGD steps at rate q and noise multiplier z: the larger of Opacus's accountant's (its
    orders) and paretofl's."""
    return max(_opacus_epsilon(z, q, steps, delta), account([Charge("poisson", q, z, steps)], delta))


__all__ = ["OpacusPlan", "plan", "from_design", "make_private", "check", "snippet"]


@dataclass(frozen=True)   # a plan is checked where it is made, and stays as checked
class OpacusPlan:
    """``make_private``'s arguments for a sample-level budget."""

    noise_multiplier: float
    max_grad_norm: float
    batch_size: int              # the DataLoader's batch size B (Poisson: the expected batch)
    dataset_size: int            # the client's n
    local_steps: int             # DP-SGD steps a round
    rounds: int
    epsilon: float               # paretofl's ε for rounds × local_steps steps
    delta: float

    def __post_init__(self):
        for name in ("batch_size", "dataset_size", "local_steps", "rounds"):
            v = getattr(self, name)
            if isinstance(v, bool) or int(v) != v or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        for name in ("noise_multiplier", "max_grad_norm"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0 < v < math.inf:
                raise ValueError(f"{name} must be a positive finite number, got {v!r}")
        check_delta(self.delta)
        # its epsilon is what its steps and noise spend, by Opacus's accountant and paretofl's, or more
        claim_holds("this Opacus plan", self.epsilon, _spent(float(self.noise_multiplier), self.sample_rate,
                                                             self.steps, self.delta))

    @property
    def sample_rate(self) -> float:
        """What make_private uses: 1/len(loader) = 1/⌈n/B⌉."""
        return 1.0 / math.ceil(self.dataset_size / self.batch_size)

    @property
    def steps(self) -> int:
        return self.rounds * self.local_steps

    @property
    def exposed(self) -> float:
        """n·δ: an (ε, δ) guarantee allows a release that exposes each sample outright with probability δ
        (Dwork and Roth 2014, §2.3), so n·δ of a client's n samples in expectation."""
        return self.dataset_size * self.delta

    @property
    def notes(self) -> list[str]:
        """Where δ is not below 1/n (Opacus's advice): the guarantee means nothing for a client's samples."""
        if self.delta < (1 - 1e-12) / self.dataset_size:      # δ = 1/n computed in floating point is 1/n
            return []
        return [f"delta {self.delta:g} is not below 1/n = {1 / self.dataset_size:.3g} for a client's n = "
                f"{self.dataset_size} samples: no meaningful guarantee (it allows publishing a sample in the "
                f"clear); design with delta well below 1/n"]

    def make_private_kwargs(self) -> dict:
        return {"noise_multiplier": self.noise_multiplier, "max_grad_norm": self.max_grad_norm,
                "poisson_sampling": True}

    def to_dict(self) -> dict:
        return {**asdict(self), "sample_rate": self.sample_rate, "steps": self.steps, "exposed": self.exposed,
                "notes": self.notes, "make_private": self.make_private_kwargs()}


def plan(epsilon: float, delta: float, rounds: int, local_steps: int, dataset_size: int, batch_size: int,
         max_grad_norm: float) -> OpacusPlan:
    """The least noise multiplier for which ``rounds × local_steps`` DP-SGD
    steps at Opacus's sample rate meet (ε, δ) for one client's samples, by
    Opacus's own accountant (its orders) as well as paretofl's (which
    searches more orders and is never above it): both report within budget."""
    check_delta(delta)
    for name, v in (("rounds", rounds), ("local_steps", local_steps), ("dataset_size", dataset_size),
                    ("batch_size", batch_size)):
        if isinstance(v, bool) or int(v) != v or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if batch_size > dataset_size:
        raise ValueError(f"batch_size {batch_size} exceeds dataset_size {dataset_size}")
    if not (max_grad_norm > 0) or math.isinf(max_grad_norm):
        raise ValueError(f"max_grad_norm must be a positive finite number, got {max_grad_norm}")
    q = 1.0 / math.ceil(dataset_size / batch_size)
    steps = int(rounds) * int(local_steps)
    if not (epsilon > 0) or math.isinf(epsilon):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon}")
    lo, hi = 1e-3, 1e5
    if _opacus_epsilon(hi, q, steps, delta) > epsilon:
        raise ValueError(f"no noise multiplier up to {hi:g} meets epsilon {epsilon:g}; raise the budget")
    while hi / lo > 1 + 1e-7:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if _opacus_epsilon(mid, q, steps, delta) <= epsilon else (mid, hi)
    z = hi
    return OpacusPlan(float(z), float(max_grad_norm), int(batch_size), int(dataset_size), int(local_steps),
                      int(rounds), _spent(z, q, steps, delta), delta)


def from_design(design, dataset_size: int, batch_size: int, local_steps: int, max_grad_norm: float) -> OpacusPlan:
    """A plan over a design's rounds at its budget: sample-level DP of each
    client's data beside the design's client-level guarantee."""
    from . import checked

    design = checked(design)
    return plan(design.budget, design.delta, design.rounds, local_steps, dataset_size, batch_size, max_grad_norm)


def make_private(privacy_engine, module, optimizer, data_loader, p: OpacusPlan):
    """``privacy_engine.make_private`` with the plan's arguments, after
    checking that the loader gives the sample rate the plan accounted for."""
    if len(data_loader.dataset) != p.dataset_size or data_loader.batch_size != p.batch_size:
        raise ValueError(f"the data loader has {len(data_loader.dataset)} samples in batches of "
                         f"{data_loader.batch_size}; the plan was made for {p.dataset_size} in batches of "
                         f"{p.batch_size}")
    return privacy_engine.make_private(module=module, optimizer=optimizer, data_loader=data_loader,
                                       **p.make_private_kwargs())


def check(privacy_engine, p: OpacusPlan) -> dict:
    """After training: Opacus's own ε (its accountant's, PRV by default in
    Opacus 1.6, or RDP) beside paretofl's RDP ε for the same history; the
    larger is reported (``epsilon``)."""
    ours = [Charge("poisson", q, z, n) for z, q, n in privacy_engine.accountant.history]
    theirs = float(privacy_engine.get_epsilon(p.delta))
    mine = account(ours, p.delta)
    steps = sum(n for _, _, n in privacy_engine.accountant.history)
    return {"opacus": theirs, "paretofl": mine, "epsilon": max(theirs, mine), "steps": steps,
            "planned_steps": p.steps, "within_plan": max(theirs, mine) <= p.epsilon * (1 + 1e-6)}


def snippet(p: OpacusPlan) -> str:
    """Python for one client's training with this plan."""
    return "\n".join([
        "from opacus import PrivacyEngine",
        "from torch.utils.data import DataLoader",
        "from paretofl.integrations import opacus as bridge",
        "",
        f"plan = bridge.OpacusPlan(**{ dict(asdict(p).items()) !r})",
        f"loader = DataLoader(client_data, batch_size={p.batch_size})   # the client's {p.dataset_size} samples",
        "engine = PrivacyEngine()",
        "model, optimizer, loader = bridge.make_private(engine, model, optimizer, loader, plan)",
        f"# each round: {p.local_steps} optimizer steps on batches from `loader`, for {p.rounds} rounds",
        "print(bridge.check(engine, plan))   # Opacus's epsilon beside paretofl's",
    ])
