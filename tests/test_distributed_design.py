"""The distributed mechanism's design (issue 48): the noise calibrated to
Δ(z) against the brute-force Rényi divergence of shifted Skellam pmfs, the
scale against a finer grid, the bits against designs at every width, the
design's ε re-derived by hand, its training, and the export to TensorFlow
Federated's DistributedDpSumFactory against the equation TFF documents."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import erfcinv

import paretofl
from paretofl import api
from paretofl import mechanisms as M
from paretofl.mechanisms import distributed as D
from paretofl.theory import skellam as sk


def test_best_scaled_clip_is_the_least_error_of_a_finer_grid_within_the_wrap_target():
    for bits, m, z in ((16, 1000, 25.0), (12, 50, 3.0), (20, 200, 1.0)):
        c, e = sk.best_scaled_clip(bits, 8192, sk.DEFAULT_BETA, m, z)
        assert e["wrap_probability"] <= sk.WRAP_TARGET
        fine = [sk.coordinate_error(bits, float(x), 8192, sk.DEFAULT_BETA, m, z)
                for x in np.geomspace(2.0 ** -6, 2.0 ** (bits - 1), 2000)]
        ok = [f["ratio"] for f in fine if f["wrap_probability"] <= sk.WRAP_TARGET]
        assert e["ratio"] <= min(ok) * 1.02
    assert sk.best_scaled_clip(6, 8192, sk.DEFAULT_BETA, 1000, 25.0) is None     # the sum cannot fit 6 bits


def test_coordinate_error_counts_the_dropout_noise_and_the_rounding():
    """Every survivor adds μ/n_min: when nobody drops the sum carries μ·m/n_min;
    m roundings add m/4; at exact integers (huge c) the ratio tends to m/n_min."""
    e0 = sk.coordinate_error(30, 1e7, 1024, sk.DEFAULT_BETA, 100, 2.0, 0.0)
    e1 = sk.coordinate_error(30, 1e7, 1024, sk.DEFAULT_BETA, 100, 2.0, 0.2)
    assert e0["ratio"] == pytest.approx(1.0, rel=1e-3)
    assert e1["ratio"] == pytest.approx(100 / 80, rel=1e-3)
    assert e0["rounding"] == pytest.approx(25.0)


def _design(**options):
    return paretofl.design(1000, 2.0, max_rounds=200, kappa=12.0, mechanism="distributed",
                           mechanism_options={"dim": 7850, **options})


def test_the_bits_chosen_are_the_fewest_within_a_tie_of_the_least_bound_of_every_width():
    """The design's width against designs at every width searched, each given."""
    d = _design()
    bounds = {}
    for b in D.BITS_SEARCHED:
        try:
            bounds[b] = _design(bits=b).utility_bound
        except ValueError:
            continue                                  # the sum cannot fit this width
    least = min(bounds.values())
    want = min(b for b, u in bounds.items() if u <= least * (1 + D.BITS_TIE))
    assert d.details["bits"] == want and d.mechanism_options["bits"] == want
    assert d.utility_bound <= least * (1 + D.BITS_TIE) * (1 + 1e-9)
    # more bits never cost quantisation error: the bound falls (or ties) as the width grows
    widths = sorted(bounds)
    assert all(bounds[y] <= bounds[x] * (1 + 1e-3) for x, y in zip(widths, widths[1:]))
    assert d.details["matches_at_bits"] is not None and d.details["matches_at_bits"] <= d.details["bits"] + 2


def test_the_designs_epsilon_is_the_skellam_bound_composed_by_hand():
    """Theorem 3.5 at the variance the design's noise carries, each round's
    participation mixed at rate q, converted with Balle et al.'s bound: the
    design's ε is never below it, and within its budget."""
    d = _design(dropout=0.1)
    mech = M.get("distributed", **d.mechanism_options)
    z = d.noise_multiplier
    mu = mech.noise_variance(z)
    l2 = sk.rounded_l2_bound(mech.scaled_clip, mech.padded, mech.beta)
    l1 = sk.rounded_l1_bound(l2, mech.padded)
    best = math.inf
    for a in range(2, 400):
        e = float(sk.skellam_rdp(a, l1, l2, mu))
        per = math.log1p(d.q * math.expm1((a - 1) * e)) / (a - 1)
        eps = d.rounds * per + math.log((a - 1) / a) - (math.log(d.delta) + math.log(a)) / (a - 1)
        best = min(best, eps)
    assert best <= d.epsilon * (1 + 1e-9) <= 2.0 * (1 + 1e-9)
    assert d.epsilon <= best * 1.05 + 0.02
    paretofl.recommendation.check_claims(d)            # its figures re-derived from what it releases


def test_a_distributed_design_without_dim_or_with_too_few_bits_is_refused_in_one_line():
    with pytest.raises(ValueError, match="dim"):
        paretofl.design(1000, 2.0, max_rounds=200, kappa=12.0, mechanism="distributed")
    with pytest.raises(ValueError, match="bit width"):
        _design(bits=6)


def test_a_distributed_design_trains_and_its_ledger_is_never_below_the_design(tmp_path):
    """digits, LR (650 weights), 20 clients: the design trains as designed and
    the trainer's ledger reports at least the design's ε."""
    d = paretofl.design(20, 4.0, max_rounds=6, kappa=2.0, mechanism="distributed",
                        mechanism_options={"dim": 650})
    r = paretofl.train(dataset="digits", model="lr", clients=20, design=d, lr=0.5)
    assert r.rounds == d.rounds
    assert d.epsilon * (1 - 1e-9) <= r.epsilon <= 4.0 * (1 + 1e-9)


# ---------------------------------------------------------------- the TFF export
def test_tff_export_covers_the_sensitivity_at_the_scale_tff_picks():
    from paretofl.integrations import tff

    d = _design(dropout=0.1)
    p, code = api.export(d, "tff", clip=0.3)
    mech = M.get("distributed", **d.mechanism_options)
    # TFF's documented equation, 2^b = 2k sqrt(rho/d' (C n)^2 + (gamma^2/4 + sigma^2) n) / gamma, holds at its scale
    k = math.sqrt(2) * float(erfcinv(p.modclip_prob))
    n, gamma = p.expected_clients_per_round, 1 / p.scale
    local = p.noise_multiplier * p.l2_clip / math.sqrt(n)
    lhs = 2 * k * math.sqrt((p.l2_clip * n) ** 2 / mech.padded + (gamma ** 2 / 4 + local ** 2) * n) / gamma
    assert lhs == pytest.approx(2 ** p.bits, rel=1e-9)
    # the survivors' Skellam variance at TFF's scale covers (z Δ(z))² on its grid: what paretofl charges
    scaled = p.scale * p.l2_clip
    carried = (p.noise_multiplier * p.l2_clip * p.scale) ** 2
    assert carried >= (d.noise_multiplier * sk.effective_sensitivity(scaled, mech.padded, mech.beta,
                                                                     d.noise_multiplier)) ** 2
    assert p.clients_per_round == math.floor(d.cohort) and p.clients_per_round / d.n_clients <= d.q
    assert n == math.ceil(0.9 * p.clients_per_round - 1e-9) and p.bits == mech.bits and p.epsilon == d.epsilon
    assert p.dim == 7850 and "7850 weights" in code
    assert "DistributedDpSumFactory" in code and f"bits={p.bits}" in code
    assert tff.tff_scale(1.0, 1.0, 22, 10, 1024) <= tff.MAX_TFF_SCALE


def test_tff_export_refuses_what_tff_cannot_run():
    d = _design(bits=24)
    with pytest.raises(ValueError, match="at most 22 bits"):
        api.export(d, "tff", clip=0.3)
    with pytest.raises(ValueError, match="exports to tff"):
        api.export(d, "flower", clip=0.3)
    central = paretofl.design(1000, 2.0, max_rounds=200, kappa=12.0)
    with pytest.raises(ValueError, match="flower or opacus"):
        api.export(central, "tff", clip=0.3)


def test_a_given_scale_that_wraps_an_edited_design_and_a_model_size_out_of_range_are_refused():
    """The attack on this work: a scaled clip so large that the sum spans
    many moduli (it keeps nothing) was designed as if it cost nothing; an
    in-memory design with a lowered noise multiplier was exported as it
    said; an infinite dim raised OverflowError."""
    import dataclasses

    with pytest.raises(ValueError, match="scaled clip given wraps") as e:
        _design(bits=8, scaled_clip=1e6)
    assert "\n" not in str(e.value)
    d = _design()
    with pytest.raises(ValueError, match="does not add up"):
        api.export(dataclasses.replace(d, noise_multiplier=1.0, epsilon=0.5), "tff", clip=0.3)
    for dim in (math.inf, math.nan, -3, 2.5, True, "7850"):
        with pytest.raises(ValueError, match="dim"):
            M.get("distributed", dim=dim)
    with pytest.raises(ValueError, match="bits"):
        M.get("distributed", bits=math.nan)


def test_the_statement_says_the_skellam_sampler_not_the_gaussians():
    """An attack found the statement's floating-point paragraph describing
    the Gaussian mechanisms' Box-Muller draws for integer Skellam noise."""
    text = paretofl.design(10, 8.0, max_rounds=3, kappa=2.0, mechanism="distributed",
                           mechanism_options={"dim": 650}).statement()
    fp = text[text.index("Floating point"):]
    assert "Skellam" in fp and "Poisson" in fp and "Box-Muller" not in text


@pytest.mark.parametrize("mechanism, options, knob", [("distributed", {"dim": 650}, "bits"),
                                                      ("bandmf", {}, "bands")])
def test_a_file_whose_details_say_other_knobs_than_its_mechanism_is_refused(tmp_path, mechanism, options, knob):
    """A family's knobs are written twice in a saved design (its details,
    for the reader; its mechanism's options, which train and export): a
    file where the two differ is refused on load, for every family's
    constructor options, not only the bands."""
    import json

    d = paretofl.design(10, 8.0, max_rounds=3, kappa=2.0, mechanism=mechanism, mechanism_options=options or None)
    path = tmp_path / "d.json"
    d.save(path)
    paretofl.Design.load(path)                         # as saved: loads
    raw = json.loads(path.read_text())
    raw["details"][knob] += 1
    path.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=f"does not add up: it records {knob} "):
        paretofl.Design.load(path)


@pytest.mark.parametrize("mechanism, options, figure", [("distributed", {"dim": 650}, "wrap_probability"),
                                                        ("distributed", {"dim": 650}, "n_min"),
                                                        ("bandmf", {}, "error_ratio")])
def test_a_familys_own_figures_are_re_derived_on_load(tmp_path, mechanism, options, figure):
    """What a family's search writes in the details (the wrap probability,
    the survivors the noise is set for, the error ratio) is re-derived from
    the design's knobs and (q, T, σ) on load; so is a width lowered in both
    places a knob is written (its wraps no longer those recorded)."""
    import json

    d = paretofl.design(10, 8.0, max_rounds=3, kappa=2.0, mechanism=mechanism, mechanism_options=options or None)
    path = tmp_path / "d.json"
    d.save(path)
    raw = json.loads(path.read_text())
    edited = json.loads(json.dumps(raw))
    edited["details"][figure] = edited["details"][figure] * 0.5
    path.write_text(json.dumps(edited))
    with pytest.raises(ValueError, match=f"it records {figure} .* where its parameters give"):
        paretofl.Design.load(path)
    if mechanism == "distributed":
        narrow = json.loads(json.dumps(raw))
        narrow["details"]["bits"] = narrow["mechanism_options"]["bits"] = 6
        path.write_text(json.dumps(narrow))
        with pytest.raises(ValueError, match="does not add up"):
            paretofl.Design.load(path)


@pytest.mark.parametrize("bits", [10, 12, 16])
def test_a_q_given_is_kept_and_a_q_min_held_where_the_width_is_given(bits):
    """With the width given, the search halves the cohort while a smaller sum fits a finer scale: only where
    the cohort is searched, and not below q_min (a q given was halved to 0.0125 at 10 bits, and refused with
    'a smaller cohort (q_max)' where the q was the user's)."""
    opts = {"dim": 7850, "bits": bits}
    try:
        d = paretofl.design(1000, 2.0, 1e-5, max_rounds=200, q=0.2, mechanism="distributed", mechanism_options=opts)
        assert d.q == 0.2
    except ValueError as err:
        assert "a smaller q" in str(err)
    try:
        d = paretofl.design(1000, 2.0, 1e-5, max_rounds=200, q_min=0.1, mechanism="distributed",
                            mechanism_options=opts)
        assert d.q >= 0.1
    except ValueError as err:
        assert "down to" in str(err)


def test_a_q_min_that_the_width_holds_is_designed_and_one_it_does_not_is_named():
    """Halving stops at q_min: q_min itself is tried (a range from 0.04 was refused at 10 bits though q = 0.04
    designs), and a refusal where q_min binds names it (it advised q_max, and the advice gave an empty range)."""
    opts = {"dim": 7850, "bits": 10}
    d = paretofl.design(1000, 4.0, 1e-5, max_rounds=200, q_min=0.04, mechanism="distributed", mechanism_options=opts)
    assert d.q >= 0.04
    with pytest.raises(ValueError, match=r"too narrow.*smaller cohort \(q_min\)"):
        paretofl.design(1000, 4.0, 1e-5, max_rounds=200, q_min=0.1, mechanism="distributed", mechanism_options=opts)
