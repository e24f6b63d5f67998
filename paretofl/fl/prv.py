"""Opacus's PRV accountant (Gopi, Lee, Wutschitz 2021) behind paretofl's
accountant interface (``step`` / ``get_epsilon``).

It lives here, on the torch side, because importing Opacus loads torch;
``paretofl account --accountant prv`` loads it on demand.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..theory.privacy import OTHER_ACCOUNTANTS, account, check_delta, check_step

#: where Opacus's PRV accountant is run at all: beyond these its grid grows past gigabytes and minutes
#: (measured: 26 GiB at small σ and many steps; 1.2 TiB asked at 10^7 steps)
PRV_LIMITS = {"steps": 20_000, "rdp_epsilon": 50.0}


@dataclass
class PRVAccountant:
    """Returns Opacus's *upper* bound on ε (its estimate plus its error)."""

    eps_error: float = 0.01
    history: list = field(default_factory=list)

    name = "prv"

    def step(self, noise_multiplier: float, sample_rate: float, steps: int = 1) -> PRVAccountant:
        check_step(noise_multiplier, sample_rate, steps)
        if steps:
            self.history.append((float(noise_multiplier), float(sample_rate), int(steps)))
        return self

    def get_epsilon(self, delta: float) -> float:
        if not self.history:
            return 0.0
        import warnings

        from opacus.accountants import PRVAccountant as _OpacusPRV

        acc = _OpacusPRV()
        acc.history = list(self.history)
        with warnings.catch_warnings():   # Opacus's log(0) at q = 1 and the like: noise, not news
            warnings.simplefilter("ignore", RuntimeWarning)
            # its RDP bound on the PRV's domain, at a tiny ε: the PRV itself is not less tight for it
            warnings.filterwarnings("ignore", message="Optimal order is the largest alpha", category=UserWarning)
            return float(acc.get_epsilon(delta=check_delta(delta), eps_error=self.eps_error))


def prv_epsilon(charges, delta: float) -> float:
    """ε of Poisson-sampled Gaussian charges by Opacus's PRV accountant (its
    upper bound), the form :func:`paretofl.theory.privacy.account` reaches
    it in (``accountant="prv"``); other samplings are refused."""
    charges = list(charges)
    for c in charges:
        if c.sampling != "poisson":
            raise ValueError(f"Opacus's PRV accountant covers Poisson sampling only, not {c.sampling!r}")
    steps = sum(int(c.steps) for c in charges)
    if steps > PRV_LIMITS["steps"]:
        raise ValueError(f"the PRV accountant is run for at most {PRV_LIMITS['steps']:,} steps (its grid grows with "
                         f"them; {steps:,} asked)")
    eps_rdp = account(charges, delta)
    if eps_rdp > PRV_LIMITS["rdp_epsilon"]:
        raise ValueError(f"the PRV accountant is run where epsilon is at most {PRV_LIMITS['rdp_epsilon']:g} "
                         f"(RDP gives {eps_rdp:.4g} here; its grid would take gigabytes)")
    acct = PRVAccountant()
    for c in charges:
        acct.step(float(c.noise_multiplier), float(c.rate), int(c.steps))
    try:
        eps = acct.get_epsilon(delta)
    except (ArithmeticError, OSError) as exc:      # Opacus's grid at extreme σ or q: it says nothing there
        raise ValueError(f"Opacus's PRV accountant cannot run here ({exc})") from None
    return max(0.0, eps)      # ε is never negative: its upper bound undershoots 0 at a large δ


OTHER_ACCOUNTANTS["prv"] = prv_epsilon
