"""The privacy statement to publish with a deployment (Ponomareva et al.
2023, "How to DP-fy ML", §5.3), written from a design and its mechanism.

Every mechanism supplies its own fields (:class:`~paretofl.mechanisms.base.Mechanism`:
the relation, what is released, who is trusted, sampling, mechanism and
accountant lines, notes of its own); this module adds what every statement
needs: the guarantee and its unit, clients with budgets of their own, the
privacy cost of choosing the hyperparameters, and the floating-point
caveat of docs/theory.md §5.4.
"""

from __future__ import annotations

from ..theory.float_noise import float_delta
from .base import get

__all__ = ["statement"]

_FLOAT = {
    "paretofl": ("Floating point: each noise value is a normal computed in double precision by Box-Muller from "
                 "53-bit uniforms of each replica's own generator (the radius's uniform drawn again within its "
                 "lowest cell, down to 2^-1013), then rounded to float32. It is bounded by 37.47 standard "
                 "deviations, and differs from an exact Gaussian draw with probability at most 2^-1013 a pair of "
                 "values: over a run of n pairs this adds at most (1 + e^epsilon) n 2^-1013 to delta "
                 "(docs/theory.md section 5.4), which paretofl's training adds to the delta it reports wherever "
                 "it exceeds a millionth of delta.{here} Not covered: noise computed in floating point lies on a "
                 "grid (Mironov 2012), and the generator is PyTorch's (a Mersenne Twister on CPU, Philox on "
                 "CUDA), not a cryptographic one: apart from the truncation's delta, the guarantee above is that of "
                 "the ideal Gaussian mechanism."),
    "flower": ("Floating point: Flower draws the noise with NumPy's generator in floating point; noise on a "
               "grid (Mironov 2012) and a generator that is not cryptographic are not covered: the guarantee "
               "above is that of the ideal Gaussian mechanism."),
}


def _cost(d) -> str:
    if d.mechanism == "nbafl":
        return ("none to the clients: T and K come from NbAFL's bounds with stated constants, and the noise from "
                "the budget; no client data was used")
    pre = (getattr(d, "details", None) or {}).get("pretrial")
    if pre:
        return (f"charged: kappa comes from a private pre-trial on the clients' own data, whose runs spent epsilon "
                f"{pre['epsilon']:.4g} alone (read from {pre.get('source', pre.get('fit'))}"
                + ("" if pre.get("verified", False) else "; not re-derived from the pre-trial's own store") +
                "); they are composed with the training's into the guarantee "
                "above. Its models were evaluated on the data set's test split, assumed not to be client data (if "
                "it is, that evaluation is a release this statement does not cover); C and the learning rate are "
                "the pre-trial's")
    if getattr(d, "tuning", None):
        return (f"none to the clients: q, T and sigma come from kappa ({d.kappa_source}), and C and the learning "
                f"rate from training on the public share of {d.tuning['store']}; no client data was used")
    if d.kappa_source == "given":
        return ("not accounted here: kappa was given. If it, C or the learning rate were chosen by training on the "
                "clients' data, that tuning spent privacy this statement does not include; say so and how")
    return (f"none to the clients if the pre-trial behind kappa ({d.kappa_source}) used only public data, as "
            "paretofl's pre-trials do (their public share); C and the learning rate "
            + ("come from the same pre-trial" if d.clip is not None else "are yours: state how you chose them"))


def _groups(d) -> list[str]:
    per = "; ".join(f"{g['clients']} client{'s' if g['clients'] != 1 else ''} at epsilon {g['budget']:g}: rate "
                    f"{g['q']:.4g}" + (f", own sigma {g['sigma']:.4g}" if d.mechanism == "client-local" else "")
                    + f", spent {g['epsilon']:.4g}" for g in d.groups)
    return [f"Budgets of their own: {per}. Each group is accounted on its own; each client's guarantee is its "
            "group's. The budgets, the groups (who is in which) and their rates are assumed public: they are "
            "inputs of the mechanism, not protected by it."]


def statement(d) -> str:
    """The statement of a :class:`paretofl.recommendation.Design`."""
    mech = get(d.mechanism, **(getattr(d, "mechanism_options", None) or {}))
    unit = ("client-level: the unit of privacy is one client and all of its data" if mech.unit == "client"
            else "sample-level: the unit of privacy is one sample of one client's data")
    if d.groups:
        guarantee = (f"each client ({d.epsilon:.4g} or less, {d.delta:g})-differential privacy at its own group's "
                     f"budget (the strictest {d.budget:g}), {unit}.")
    else:
        guarantee = f"({d.epsilon:.4g}, {d.delta:g})-differential privacy (budget {d.budget:g}), {unit}."
    rounds = f"{d.rounds} round{'s' if d.rounds != 1 else ''}"
    lines = [
        "Privacy statement (after Ponomareva et al. 2023, How to DP-fy ML, section 5.3)",
        f"- Guarantee: {guarantee}",
        f"- Neighbouring relation: {mech.relation}.",
        f"- Released: {mech.released}; {rounds}. Evaluation on client data is not released.",
        f"- Trusted: {mech.trusted}.",
        f"- Sampling: {mech.sampling_text(d)}; N = {d.n_clients} clients.",
        f"- Mechanism: {mech.mechanism_text(d)}.",
        f"- Accountant: {mech.accountant_text(d)}; converted to (epsilon, delta) with Balle et al. 2020, Thm 21 "
        "(improved RDP conversion).",
        f"- Privacy cost of choosing the hyperparameters: {_cost(d)}.",
    ]
    if d.groups:
        lines += [f"- {x}" for x in _groups(d)]
    lines += [f"- {x}" for x in mech.statement_notes(d)]
    here = f" Here, at epsilon {d.epsilon:.4g} and up to 1e30 pairs: at most {float_delta(d.epsilon):.1e}."
    lines.append(f"- {(mech.float_text(d) or _FLOAT[mech.framework]).format(here=here)}")
    if d.delta * d.n_clients >= 0.1:
        lines.append(f"- Note: delta {d.delta:g} is not small against 1/N = {1 / d.n_clients:.3g}.")
    return "\n".join(lines)
