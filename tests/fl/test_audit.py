"""The empirical privacy audit: its statistics against independent formulas,
its premise (the canary pair) checked exactly, every registered mechanism's
every audit setting passes, every broken copy is caught, and NbAFL reports
the ε its clipping guarantees."""

import json
import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import binom, norm

from paretofl.cli import main
from paretofl.fl import audit as A
from paretofl.fl.algorithms import NbAFL
from paretofl.mechanisms import AuditSetting, audit_setting, audit_settings
from paretofl.theory.privacy import compute_epsilon


@pytest.mark.parametrize("k,n", [(0, 10), (3, 10), (0, 1000), (17, 1000), (999, 1000), (5, 7)])
def test_clopper_pearson_upper_is_where_the_binomial_tail_equals_alpha(k, n):
    """The exact (Clopper–Pearson) upper bound u solves P[Bin(n, u) ≤ k] = α."""
    u = float(A.clopper_pearson_upper(k, n, 0.025))
    assert binom.cdf(k, n, u) == pytest.approx(0.025, rel=1e-6)
    assert k / n < u < 1


def test_clopper_pearson_all_successes_is_one():
    assert float(A.clopper_pearson_upper(50, 50, 0.025)) == 1.0


def test_perfect_separation_gives_the_closed_form_bound():
    """No errors on n runs per world: the bound is ln((1 - δ - u)/u) with
    u = 1 - 0.025^(1/n), the Clopper–Pearson bound of 0 of n."""
    s_out, s_in = np.zeros(4000), np.ones(4000)
    eps, info = A.epsilon_lower_bound(s_out, s_in, delta=1e-5)
    u = 1 - 0.025 ** (1 / 2000)
    assert info["fpr"] == 0 and info["fnr"] == 0
    assert eps == pytest.approx(math.log((1 - 1e-5 - u) / u), rel=1e-9)


def _gaussian_epsilon(mu, delta):
    """Exact ε of the Gaussian mechanism with sensitivity/noise ratio mu
    (Balle & Wang 2018): δ(ε) = Φ(μ/2 - ε/μ) - e^ε Φ(-μ/2 - ε/μ)."""
    f = lambda e: norm.cdf(mu / 2 - e / mu) - math.exp(e) * norm.cdf(-mu / 2 - e / mu) - delta  # noqa: E731
    return brentq(f, 0, 100)


@pytest.mark.parametrize("mu", [0.5, 1.0, 2.0, 4.0])
def test_lower_bound_never_exceeds_the_true_epsilon_and_grows_with_leakage(mu):
    """Scores of a Gaussian mechanism whose ε is known exactly: over 10
    seeds the lower bound stays below the truth (95 % confidence each), and
    is informative when the leakage is large."""
    truth = _gaussian_epsilon(mu, 1e-5)
    bounds = []
    for seed in range(10):
        rng = np.random.default_rng(seed)
        eps, _ = A.epsilon_lower_bound(rng.normal(0, 1, 20000), rng.normal(mu, 1, 20000), 1e-5, seed=seed)
        bounds.append(eps)
    assert max(bounds) <= truth
    if mu >= 2:  # truth ≥ 5.9; 10^4 runs per half can show about ln(10^4/3.7) ≈ 7.9 at most
        assert min(bounds) > 3.0


def _setting(**params):
    base = dict(sigma=1.0, q=0.5, clients=4, samples=20, features=50, clip=1.0)
    return AuditSetting("test", "client-aggregate", "add-remove", "", {**base, **params})


def test_canary_pair_is_the_pair_the_accountant_bounds():
    """Premise of the client-level audit, checked without noise (σ = 0): no
    real client touches the canary coordinate (the out-world release is
    exactly 0 there), and in the in-world it is C/(qN) exactly when the
    canary client was sampled, which happens at rate q."""
    s = _setting(sigma=0.0, clients=10, features=10)
    out = A._scores_client(s, "out", 2000, 1, "none")["projection"]
    inn = A._scores_client(s, "in", 2000, 10**6, "none")["projection"]
    assert np.all(out == 0)
    assert np.all(np.isclose(inn, 0) | np.isclose(inn, 1.0 / 5))
    assert abs(np.mean(inn > 0) - 0.5) < 0.04
    broken = A._scores_client(s, "in", 2000, 10**6, "no-clip")["projection"]
    assert np.isclose(broken.max(), 10.0 / 5)        # unclipped, the canary's 10 C goes through


def test_the_fixed_cohort_witness_moves_the_sum_by_2c_when_the_canary_displaces_a_client():
    """Premise of Flower's audits, without noise: every client sends a (C in
    the canary coordinate), the canary client -a; m = 19 of 20 present are
    drawn, so with the canary drawn (probability 19/20) the sum is 17 C
    instead of 19 C; without it (add/remove: 19 present) always 19 C."""
    s = audit_setting("flower-accounted")
    zero = AuditSetting("t", s.mechanism, s.canary, "", {**s.params, "sigma": 0.0})
    out = A._scores_client(zero, "out", 2000, 1, "none")["projection"] * 19
    inn = A._scores_client(zero, "in", 2000, 10**6, "none")["projection"] * 19
    assert np.allclose(out, 19.0)
    assert np.all(np.isclose(inn, 19.0) | np.isclose(inn, 17.0))
    assert abs(np.mean(np.isclose(inn, 17.0)) - 19 / 20) < 0.02


def _noise_only(s, world, broken, n=3000):
    """The release's squared norm per coordinate when every update is ~0
    (lr ≈ 0, a zero canary): the released noise alone."""
    s = AuditSetting(s.name, s.mechanism, s.canary, "", {**s.params, "lr": 1e-12, "clip": 1.0, "canary": 0.0})
    return A._scores_client(s, world, n, 7 if world == "out" else 10**6, broken)["norm"]


def test_released_noise_does_not_depend_on_the_cohort():
    """The aggregate view releases N(0, qN σ²C²) whatever the cohort's size:
    the noise alone has the same spread whether the canary client exists or
    not.  The release before the fix (each client adding σ²C², the server
    topping small cohorts up to qN) spreads more when the client is there,
    because its norm counts the cohort."""
    s = _setting()
    d = (s.params["features"] + 1) * 10 + 10
    qn = s.params["q"] * s.params["clients"]
    expected = d * qn / qn**2                       # σ = C = 1: per coordinate qN σ²C² / (qN)²
    for world in ("out", "in"):
        assert np.mean(_noise_only(s, world, "none")) == pytest.approx(expected, rel=0.02)
    legacy_out = np.mean(_noise_only(s, "out", "legacy-topup"))
    legacy_in = np.mean(_noise_only(s, "in", "legacy-topup"))
    assert legacy_in > legacy_out * 1.05 and legacy_out > expected * 1.05


SETTINGS = [s.name for s in audit_settings()]
CASES = [(s, b) for s in SETTINGS for b in A.breaks_for(s)]
#: breaks a one-release audit shows only with 200,000 runs (the command's default)
SLOW_TO_SHOW = ("amplified-claim", "charged-at-z", "charged-as-before", "uncentred-count", "loosest-sigma")
#: settings whose release is many releases (a pipeline of eight): fewer runs, still enough to catch their breaks
#: (the shared noise separates the worlds exactly: 1,500 evaluated runs a world show 6.0 against the claim 4.84).
#: The private pre-trial's noise comes from the operating system's entropy, so these audits are not reproducible:
#: at 6,000 runs "no-clip" showed 5.59 against 4.84 in most runs here and fell short once in CI (12 false positives
#: of 3,000 where 2 are usual); at 20,000, 6.54 and 6.80 in two runs (2026-11-26)
RUNS = {"client-aggregate/pipeline": 20000}
#: settings whose runs cost minutes each on a 2-core CPU (the distributed mechanism's integer shares of a padded,
#: rotated update for every client): run by make test-slow
SLOW_SETTINGS = ("distributed", "distributed/dropout")


#: broken copies that take over 90 s each on the 2-core CPU (measured 2026-11-25): run by make test-slow, so that
#: make test stays near 15 minutes (the other copies of their settings still run in it)
SLOW_CASES = {("bandmf", "every-round"), ("bandmf", "independent-noise"),
              ("client-aggregate/adaptive", "uncentred-count")}


def _slow(*values):
    """A case as it is, or marked slow where its setting is one of :data:`SLOW_SETTINGS` (or the case one of
    :data:`SLOW_CASES`)."""
    if values[0] in SLOW_SETTINGS or tuple(values) in SLOW_CASES:
        return pytest.param(*values, marks=pytest.mark.slow)
    return values[0] if len(values) == 1 else values


@pytest.mark.parametrize("setting", [_slow(s) for s in SETTINGS])
def test_every_registered_setting_passes(setting):
    real = A.audit(setting, runs=RUNS.get(setting, 20000))
    assert 0 < real.epsilon_claimed < (200 if setting == "nbafl/paper" else 6.0)   # NbAFL's paper: what it guarantees
    assert not real.violated, real


def test_groups_are_audited_each_against_its_own_claim():
    """Clients with budgets of their own: a client of the strict group (rate
    0.01) and one of the loose group (rate 1), under one noise on the sum,
    each claim its own group's ε — the subsampled Gaussian at its own rate,
    recomputed here — and the broken copy that samples every group at the
    loosest rate while claiming each group's own ε is caught (above)."""
    for name, q in (("client-aggregate/groups-strict", 0.01), ("client-aggregate/groups-loose", 1.0)):
        p = audit_setting(name).params
        z = p["sigma"] * np.sqrt(sum(p["rates"][g] for g in p["group_of"]))
        assert A.claimed_epsilon(name) == pytest.approx(compute_epsilon(q, z, 1, 1e-5), rel=1e-9)
    assert A.claimed_epsilon("client-aggregate/groups-strict") < 0.2 * A.claimed_epsilon(
        "client-aggregate/groups-loose")
    # the local view: the canary client claims its own group's sigma, seen at each participation
    p = audit_setting("client-local/groups").params
    assert A.claimed_epsilon("client-local/groups") == pytest.approx(
        compute_epsilon(p["q"], p["sigmas"][0], 1, 1e-5, "attributed"), rel=1e-9)


@pytest.mark.parametrize("setting,broken", [_slow(*c) for c in CASES])
def test_broken_copies_are_caught(setting, broken):
    """Every broken copy of every setting is caught: noise ÷ 10 and skipped
    clipping, and per mechanism the flaw it had before its fix or that
    another framework has — the aggregate view's top-up (caught by the
    release's norm), DP-SGD dividing by the data's own count (norm too),
    the local view charged as if subsampling hid who took part, Flower's
    accounted mode charged at z when m < N (before issue 35), Flower's
    replace-one accountant given z, adaptive clipping's uncentred count and
    noise at the next C (Flower 1.41's wrappers), groups sampled or noised
    at the loosest group's setting."""
    runs = 200000 if broken in SLOW_TO_SHOW else RUNS.get(setting, 20000)
    r = A.audit(setting, runs=runs, broken=broken)
    real_claim = A.claimed_epsilon(setting)
    b = next(x for x in audit_setting(setting).breaks if x.name == broken)
    if b.claim:
        assert r.epsilon_claimed < real_claim              # the broken charge under-reported
        assert r.epsilon_lower <= real_claim               # what is charged now holds
    else:
        assert r.epsilon_claimed == real_claim             # claimed for the unbroken mechanism
    assert r.violated, (broken, r)
    if broken in ("legacy-topup", "private-divisor"):
        assert r.details["score"] in ("norm", "-norm")     # the spread, not the mean, gives it away


def _gaussian_epsilon_classic(mu, delta):
    """ε of a Gaussian of sensitivity/noise ratio mu through its RDP curve
    αμ²/2 and the classic conversion ε = RDP(α) + ln(1/δ)/(α − 1) (Mironov
    2017), minimised over α > 1: an upper bound any tighter conversion
    stays under."""
    from scipy.optimize import minimize_scalar

    r = minimize_scalar(lambda a: a * mu * mu / 2 + math.log(1 / delta) / (a - 1), bounds=(1.0001, 1e4),
                        method="bounded")
    return r.fun


def test_the_pipeline_claims_the_pretrial_and_the_training_composed():
    """Every client every round (q = 1): each release of the pipeline is a
    Gaussian mechanism of sensitivity 1 and noise z = σ√m, so the whole
    pipeline is one Gaussian of μ = √(Σ T/z²): its claim lies between that
    Gaussian's exact ε (Balle and Wang 2018: never under-reported) and the
    classic RDP conversion; the broken claim, the training's alone, is the
    same for μ = √(T/z²) of the training.  And the claim is what a design
    made from such a pre-trial composes: the spec's charges with the
    training's, in one accountant."""
    from paretofl.pretrial.spec import Spec
    from paretofl.theory.privacy import Charge, account

    s = audit_setting("client-aggregate/pipeline")
    p = s.params
    m = p["q"] * p["clients"]
    z_pre = [sg * math.sqrt(m) for sg in p["sigmas"]]
    z_train = p["sigma"] * math.sqrt(m)
    mu_all = math.sqrt(sum(p["pretrial_rounds"] / z ** 2 for z in z_pre) + p["rounds"] / z_train ** 2)
    mu_train = math.sqrt(p["rounds"]) / z_train
    claim, dropped = A.claimed_epsilon(s), A.claimed_epsilon(s, "pretrial-uncharged")
    for eps, mu in ((claim, mu_all), (dropped, mu_train)):
        assert _gaussian_epsilon(mu, p["delta"]) <= eps <= _gaussian_epsilon_classic(mu, p["delta"])
    assert dropped < 0.2 * claim
    spec = Spec.from_dict(dict(dataset="digits", model="lr", subset="all", clients=p["clients"], q=[p["q"]],
                               sigmas=list(p["sigmas"]), rounds=[p["pretrial_rounds"]], seeds=1, clip=p["clip"],
                               delta=p["delta"], private=True, epsilon=10.0))
    training = Charge("poisson", p["q"], z_train, p["rounds"])
    assert claim == pytest.approx(account([*spec.private_charges(), training], p["delta"]), rel=1e-9)
    # the noise multipliers the adversary uses are the public ones
    _, _, z, zt = A.pipeline_release(s, "out", 2, 1)
    assert np.allclose(z, z_pre) and zt == pytest.approx(z_train)


def test_the_recovery_attack_fails_on_the_pipeline_and_succeeds_on_shared_noise():
    """Issue 44's attack replayed on the pipeline's release: from two runs
    of the pre-trial, A = (z_j y_0 − z_0 y_j)/(z_j − z_0).  Where the runs
    at one seed share their generator (the pre-trial before the fix) it
    gives back the release without noise, whichever pair and round: 1 (the
    canary's clipped update, in its units) with the canary client, 0
    without, so one release tells the worlds apart.  The real pipeline's
    runs draw their own noise: the pairs disagree by about the noise, and a
    guess from A is right little more often than a coin."""
    s = audit_setting("client-aggregate/pipeline")
    n = 1000
    for world, truth in (("in", 1.0), ("out", 0.0)):
        x, _, z, _ = A.pipeline_release(s, world, 200, 10**6 if world == "in" else 1, "shared-noise")
        assert np.abs(A.recovered(x, z) - truth).max() < 1e-4
    guesses = []
    for world in ("in", "out"):
        x, _, z, _ = A.pipeline_release(s, world, n, 10**6 if world == "in" else 1)
        a = A.recovered(x, z)
        noise = (x[:, 1] - x[:, 0]).std()
        assert np.abs(a[:, 0] - a[:, 1]).std() > 0.5 * noise > 0.5
        guesses.append(a.mean((1, 2)) > 0.5)
    right = (guesses[0].sum() + (~guesses[1]).sum()) / (2 * n)
    assert right < 0.62          # a Gaussian of shift 1 and std about 4: 0.55 expected


def test_the_audit_lists_the_pipeline_with_its_broken_copies():
    from paretofl import api

    assert api.audit_jobs(["client-aggregate/pipeline"], "all") == [
        ("client-aggregate/pipeline", b) for b in ("noise/10", "no-clip", "shared-noise", "pretrial-uncharged")]
    assert ("client-aggregate/pipeline", "none") in api.audit_jobs(["client-aggregate"])
    names = api.audit_names()
    assert "client-aggregate/pipeline" in names["settings"]
    assert {"shared-noise", "pretrial-uncharged"} <= set(names["breaks"])


def test_nbafl_paper_calibration_exceeds_its_nominal_epsilon_but_not_what_paretofl_reports():
    r = A.audit("nbafl/paper", runs=20000)
    assert r.epsilon_lower > r.details["epsilon_paper"] == 1.0
    assert not r.violated and r.epsilon_claimed > r.epsilon_lower


def test_nbafl_reports_the_epsilon_clipping_guarantees():
    eng = A._engine(A._synthetic(64, 1, 10), 1, 1, 0, "none")
    honest = NbAFL(eng, epsilon=2.0, rounds=3, delta=1e-5, clip=10.0)          # the default calibration
    assert honest.fixed_epsilon() == pytest.approx(2.0, rel=1e-4)
    assert compute_epsilon(1.0, honest.sigma_u / 20.0, 3, 1e-5) <= 2.0 + 1e-9  # sensitivity 2C
    paper = NbAFL(eng, epsilon=2.0, rounds=3, delta=1e-5, clip=10.0, calibration="paper")
    z = paper.sigma_u / 20.0
    assert paper.fixed_epsilon() == pytest.approx(compute_epsilon(1.0, z, 3, 1e-5))
    assert paper.fixed_epsilon() > 2.0 and paper.epsilon_paper == 2.0
    assert honest.sigma_u > 10 * paper.sigma_u
    with pytest.raises(ValueError, match="calibration"):
        NbAFL(eng, epsilon=2.0, rounds=3, calibration="magic")


def test_audit_rejects_bad_arguments():
    with pytest.raises(ValueError, match="mechanism or audit setting"):
        A.audit("magic")
    with pytest.raises(ValueError, match="break"):
        A.audit("nbafl", broken="half")
    with pytest.raises(ValueError, match="break"):
        A.audit("nbafl", broken="legacy-topup")             # a break of another mechanism
    with pytest.raises(ValueError, match="runs"):
        A.audit("nbafl", runs=10)


def test_audit_command_json_contract(capsys):
    """A mechanism's name runs all of its settings; a setting's name that one."""
    assert main(["audit", "--mechanism", "client-local", "sample", "--runs", "2000", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["setting"] for r in rows] == ["client-local", "client-local/groups", "sample"]
    for r in rows:
        assert {"mechanism", "setting", "epsilon_claimed", "epsilon_lower", "score"} <= set(r)
        assert 0 <= r["epsilon_lower"] <= r["epsilon_claimed"] and r["runs"] == 2000
    assert main(["audit", "--mechanism", "sample", "--runs", "4000", "--break", "noise/10", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["broken"] == "noise/10" and row["epsilon_lower"] > row["epsilon_claimed"]


def test_the_audit_runs_every_registered_mechanism():
    """paretofl audit covers the registry: every mechanism has at least one
    setting, and "all" runs each of them."""
    from paretofl import api
    from paretofl.mechanisms import names

    jobs = api.audit_jobs(["all"])
    assert {audit_setting(s).mechanism for s, _ in jobs} == set(names())
    assert len(api.audit_jobs(["all"], "all")) == len(CASES)
