"""The integer side of distributed DP (the ``distributed`` mechanism,
docs/theory.md §8): the randomised Hadamard rotation, conditional
randomised rounding, Skellam noise and the modular sum, each replica's
draws from its own generator (:class:`paretofl.fl.engine.Engine`'s
``gens``).  Everything here is float64 or int64: a float32 grid would
lose the fractional parts rounding needs at 2^20 and more."""

from __future__ import annotations

import math

import torch

from ..theory.skellam import n_min  # noqa: F401  (the fewest survivors: the design's and the release's)

__all__ = ["hadamard", "rotate", "unrotate", "round_conditional", "skellam", "modular_sum"]


def hadamard(x: torch.Tensor) -> torch.Tensor:
    """H x / √n along the last axis (n a power of two): the normalised
    Walsh–Hadamard transform, orthogonal and its own inverse."""
    n = x.shape[-1]
    lead = x.shape[:-1]
    y = x.reshape(-1, n)
    h = 1
    while h < n:
        y = y.reshape(-1, n // (2 * h), 2, h)
        y = torch.stack((y[:, :, 0] + y[:, :, 1], y[:, :, 0] - y[:, :, 1]), dim=2)
        h *= 2
    return (y.reshape(*lead, n) / math.sqrt(n))


def rotate(x: torch.Tensor, signs: torch.Tensor, padded: int) -> torch.Tensor:
    """H D x/√d' of rows x (K, d) padded with zeros to d', D = diag(signs) (K, d')."""
    out = x.new_zeros((x.shape[0], padded))
    out[:, :x.shape[1]] = x
    return hadamard(out * signs)


def unrotate(y: torch.Tensor, signs: torch.Tensor, dim: int) -> torch.Tensor:
    """The inverse of :func:`rotate`: D H y/√d', cropped to ``dim``."""
    return (hadamard(y) * signs)[:, :dim]


def round_conditional(x: torch.Tensor, bound: float, gen: torch.Generator, nearest: bool = False) -> torch.Tensor:
    """Conditional randomised rounding of rows x (n, d') (float64): each
    coordinate up with probability its fractional part, rows redrawn until
    their L2 norm is at most ``bound`` (Kairouz, Liu, Steinke 2021).
    ``nearest``: deterministic round-to-nearest, no condition (a broken copy)."""
    if nearest:
        return torch.round(x)
    lo = torch.floor(x)
    frac = x - lo
    out = lo + (torch.rand(x.shape, dtype=x.dtype, device=x.device, generator=gen) < frac).to(x.dtype)
    bad = out.pow(2).sum(1) > bound * bound
    for _ in range(200):      # each try fails with probability <= beta; only a vector past its clip fails always
        if not bool(bad.any()):
            break
        redo = lo[bad] + (torch.rand(lo[bad].shape, dtype=x.dtype, device=x.device, generator=gen)
                          < frac[bad]).to(x.dtype)
        out[bad] = redo
        bad = out.pow(2).sum(1) > bound * bound
    return out


def skellam(shape, variance: float, gen: torch.Generator, device) -> torch.Tensor:
    """Integer Skellam noise of ``variance`` (Poisson(μ/2) − Poisson(μ/2)), int64."""
    if variance <= 0:
        return torch.zeros(shape, dtype=torch.int64, device=device)
    lam = torch.full(shape, variance / 2.0, dtype=torch.float64, device=device)
    return (torch.poisson(lam, generator=gen) - torch.poisson(lam, generator=gen)).to(torch.int64)


def modular_sum(shares: torch.Tensor, bits: int) -> torch.Tensor:
    """Σ of int64 rows (n, d') modulo 2^bits, centred to [−2^(bits−1), 2^(bits−1))
    (two's complement): what secure aggregation releases."""
    mod = 1 << int(bits)
    s = torch.remainder(torch.remainder(shares, mod).sum(0), mod)
    return torch.where(s >= mod // 2, s - mod, s)


def survivors(n: int, drop: float, gen: torch.Generator, device) -> torch.Tensor:
    """Which of n selected clients survive to the end of secure aggregation (bool (n,))."""
    if drop <= 0:
        return torch.ones(n, dtype=torch.bool, device=device)
    return torch.rand(n, dtype=torch.float64, device=device, generator=gen) >= drop


def break_release(rel, broken: str, params: dict) -> None:
    """The audit's broken copies of :class:`paretofl.fl.release.DistributedRelease`
    (the ``distributed`` mechanism's breaks), applied to a built release."""
    if "drop" in params:
        rel.drop_rate, rel.keep = float(params["drop"]), 0      # the canary's client (0) always survives
    if broken == "no-inflation":           # round to nearest, noise set for c as if rounding inflated nothing
        rel.nearest, rel.calibrated_to = True, rel.scaled
    elif broken == "fit-to-bits":          # 6 bits: the noise cut to fit them (std 2^5/4), the sum modulo 2^6
        rel.modulus_bits = 6
        z = float(rel.noise().std[0])        # the mechanism's noise multiplier on the sum
        rel.calibrated_to = min(rel.sensitivity_at(z), 2.0 ** 5 / 4 / z)
    elif broken == "fewer-noisers":        # each adds the share of a cohort of 128
        rel.noise_split = lambda n, need: 128
    elif broken == "noise-of-all":         # each adds mu/|S| as if every selected client survived
        rel.noise_split = lambda n, need: n
