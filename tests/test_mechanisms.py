"""The mechanisms as objects: the registry every layer reads, each
mechanism's charge against formulas written out here (not read from the
code), the one ledger against the accountant, and the statement of every
kind of design (docs/theory.md §5.3)."""

import math

import numpy as np
import pytest

import paretofl
from paretofl import mechanisms as M
from paretofl.theory import privacy as P
from paretofl.theory.ledger import Ledger


def test_the_registry_lists_every_mechanism_once_with_what_it_says_of_itself():
    assert M.names() == ("client-aggregate", "bandmf", "bandmf-amplified", "distributed", "flower",
                         "flower-accounted", "client-local", "nbafl", "sample")
    assert set(M.names(designable=True)) == {"client-aggregate", "client-local", "flower", "flower-accounted",
                                             "bandmf", "bandmf-amplified", "distributed"}
    assert "nbafl" not in M.names(trainable=True)
    for name in M.names():
        m = M.get(name)
        assert m.name == name and m.relation and m.trusted and m.released and m.summary
        assert m.selection in ("poisson", "fixed", "cyclic", "cyclic-poisson")
        assert m.split in ("shares", "server", "client")
        assert M.audit_settings(name), f"{name} has no audit setting"
    with pytest.raises(ValueError, match="mechanism must be one of"):
        M.get("aggregate")
    with pytest.raises(ValueError, match="takes no option"):
        M.get("client-local", clip_quantile=0.5)


def test_every_audit_setting_lists_the_noise_and_clipping_breaks():
    """Each setting a real mechanism runs has broken copies the audit must
    catch (NbAFL's paper calibration is itself the broken one: nothing to break)."""
    for s in M.audit_settings():
        if s.name == "nbafl/paper":
            assert s.breaks == ()
            continue
        assert "noise/10" in s.break_names(), s.name
        # adaptive clipping's canary fits under C (it must, to move the count):
        # its clipping is audited by the plain aggregate setting, the same code (and distributed/dropout's
        # by the plain distributed setting)
        assert "no-clip" in s.break_names() or s.name in ("client-aggregate/adaptive", "distributed/dropout"), s.name
    names = [s.name for s in M.audit_settings()]
    assert len(names) == len(set(names))
    assert {"client-aggregate/adaptive", "client-local/groups", "flower", "flower-accounted"} <= set(names)


@pytest.mark.parametrize("q,sigma,n", [(0.1, 1.0, 100), (0.5, 0.7, 20), (1.0, 2.0, 7)])
def test_charges_against_the_formulas(q, sigma, n):
    """Each mechanism's charge, written out: the aggregate view a Poisson
    Gaussian of σ√(qN); the local view σ at each participation, seen;
    DP-SGD (q_b, σ) per step; Flower replace-one the fixed-size bound at
    σ√m / 2; Flower's accountant σ√m (m = N) or σ√m / 2 (m < N); NbAFL a
    Gaussian of σ_U/(2C) per upload."""
    m = q * n
    assert M.get("client-aggregate").charge(q, sigma, n) == P.Charge("poisson", q, sigma * math.sqrt(m))
    assert M.get("client-local").charge(q, sigma, n) == P.Charge("attributed", q, sigma)
    assert M.get("sample").charge(q, sigma, steps=3) == P.Charge("poisson", q, sigma, 3)
    if abs(m - round(m)) < 1e-9:
        assert M.get("flower").charge(q, sigma, n) == P.Charge("fixed-size", q, sigma * math.sqrt(m) / 2)
        acc = M.get("flower-accounted").charge(q, sigma, n)
        assert acc.sampling == "none"
        assert acc.noise_multiplier == pytest.approx(sigma * math.sqrt(m) / (1 if q == 1 else 2))
    assert M.get("nbafl").charge(1.0, sigma) == P.Charge("none", 1.0, sigma)


def test_charges_are_vectorised_over_replicas_and_groups():
    """One form for a ledger's rows: arrays of rates and noise give each row
    the charge a scalar call gives it."""
    q, s = np.array([0.1, 0.5, 1.0]), np.array([1.0, 0.0, 3.0])
    ch = M.get("client-aggregate").charge(q, s, 40)
    assert ch.size == 3
    for i in range(3):
        assert ch.at(i) == M.get("client-aggregate").charge(float(q[i]), float(s[i]), 40)
    with pytest.raises(ValueError, match="q·N >= 1"):
        M.get("client-aggregate").charge(0.01, 1.0, 10)
    with pytest.raises(ValueError, match="whole number"):
        M.get("flower").check_rate(0.25, 10)


def test_adaptive_clipping_is_an_option_of_the_aggregate_mechanism_charged_with_it():
    plain, adaptive = M.get("client-aggregate"), M.get("client-aggregate", clip_quantile=0.5, count_noise=5.0)
    assert adaptive.adaptive and not plain.adaptive
    assert adaptive.charge(0.5, 1.0, 100) == plain.charge(0.5, 1.0, 100)       # the same charge ...
    z = plain.charge(0.5, 1.0, 100).noise_multiplier
    z_sum = adaptive.noise(0.5, 1.0, 100).std                                  # ... the sum's own noise raised
    assert (z_sum ** -2 + (2 * 5.0) ** -2) ** -0.5 == pytest.approx(z, rel=1e-12)
    with pytest.raises(ValueError, match="clip_quantile"):
        M.get("client-aggregate", clip_quantile=1.5)


def test_the_ledger_books_charges_as_the_accountant_composes_them():
    """Rows charged different rounds: each row's ε is the accountant's for
    its own charges; a noise multiplier of 0 is an unlimited row."""
    charges = [M.get("client-aggregate").charge(np.array([0.1, 0.3]), np.array([1.2, 0.0]), 50),
               M.get("sample").charge(0.02, np.array([1.1, 1.1]), steps=np.array([2, 0]))]
    led = Ledger(2, 1e-5)
    for _ in range(3):
        led.commit(charges, led.increment(charges), np.array([True, True]))
    eps = led.epsilon()
    acc = P.RDPAccountant().step(1.2 * math.sqrt(5), 0.1, 3).step(1.1, 0.02, 6)
    assert eps[0] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-12)
    assert math.isinf(eps[1])
    assert led.grid_epsilon()[0] >= eps[0]


# --------------------------------------------------------------------------
# statements
# --------------------------------------------------------------------------
def _lines(text):
    return {line.split(":", 1)[0].lstrip("- "): line for line in text.splitlines() if line.startswith("- ")}


def test_every_statement_has_the_fields_and_the_floating_point_caveat():
    designs = [paretofl.design(100, 2, max_rounds=50, mechanism=m,
                               mechanism_options={"dim": 650} if "dim" in M.REGISTRY[m].constructor_options else None)
               for m in M.names(designable=True)]
    designs.append(paretofl.design(100, None, max_rounds=50, budgets=paretofl.budgets.Budgets.shares(
        [0.5, 0.5], [1, 4], 100)))
    designs.append(paretofl.nbafl_design(50, 60, 0.01, 10, 512))
    for d in designs:
        f = _lines(d.statement())
        for key in ("Guarantee", "Neighbouring relation", "Released", "Trusted", "Sampling", "Mechanism",
                    "Accountant", "Privacy cost of choosing the hyperparameters", "Floating point"):
            assert key in f, (d.mechanism, key)
        assert "Mironov 2012" in f["Floating point"]


def test_the_local_views_statement_says_zero_out_and_that_membership_is_not_protected():
    f = _lines(paretofl.design(100, 2, max_rounds=50, mechanism="client-local").statement())
    assert "zero-out" in f["Neighbouring relation"] and "membership" in f["Neighbouring relation"]
    assert "not protected" in f["Neighbouring relation"]
    assert "add/remove" not in f["Neighbouring relation"]


def test_adaptive_clipping_says_the_count_and_the_changing_clipping_norm_are_released():
    d = paretofl.design(100, 2, max_rounds=50, mechanism_options={"clip_quantile": 0.5})
    text = d.statement()
    assert "count" in text and "every round's C is released" in text
    assert "clip_quantile" in d.to_dict()["mechanism_options"]


def test_a_group_design_states_that_budgets_and_rates_are_assumed_public():
    b = paretofl.budgets.Budgets.shares([0.6, 0.4], [1, 8], 50)
    text = paretofl.design(50, None, max_rounds=40, budgets=b).statement()
    assert "assumed public" in text and "Budgets of their own" in text


def test_flowers_statement_says_the_server_sees_updates_unclipped():
    for fw in ("flower", "flower-accounted"):
        f = _lines(paretofl.design(100, 2, max_rounds=50, framework=fw).statement())
        assert "unclipped" in f["Trusted"]
    f = _lines(paretofl.design(10, 5, max_rounds=10, q=0.5, framework="flower-accounted").statement())
    assert "z/2" in f["Accountant"] and "displace" in f["Accountant"]


def test_nbafls_statement_names_the_guarantee_its_calibration_does_not_meet():
    d = paretofl.nbafl_design(50, 60, 0.01, 10, 512)
    assert d.mechanism == "nbafl" and d.rounds >= 1 and d.details["clients_per_round"] >= 1
    text = d.statement()
    assert "replace-one" in text and "do not publish their figure" in text


def test_an_audit_setting_named_twice_runs_once():
    """A mechanism and one of its settings named together: each setting once."""
    from paretofl import api

    jobs = api.audit_jobs(["distributed", "distributed/dropout"], "all")
    assert len(jobs) == len(set(jobs)) and {s for s, _ in jobs} == {"distributed", "distributed/dropout"}


def test_every_family_option_is_a_design_flag_made_from_the_family():
    """Each mechanism's constructor options carry their flag's kind and help
    (``option_flags``), and ``paretofl design`` has a flag for each, typed
    and naming the families that take it: a new family with options
    touches no CLI code (issue 47)."""
    from paretofl.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command" or getattr(a, "choices", None)
               and "design" in (a.choices or {}))
    design = sub.choices["design"]
    flags = {a.dest: a for a in design._actions}
    for name, cls in M.REGISTRY.items():
        assert set(cls.option_flags) == set(cls.constructor_options), name
        for o, (kind, text) in cls.option_flags.items():
            assert kind in ("int", "float") and text, (name, o)
            act = flags[o]
            assert name in act.help and text in act.help, (name, o, act.help)
            assert act.type("3") == (3 if kind == "int" else 3.0)


@pytest.mark.parametrize("name", [n for n in M.names() if n not in ("nbafl",)])
def test_a_rate_per_replica_with_one_cohort_given_is_charged_and_noised_per_replica(name):
    """q one per replica and the cohort given once (a ledger of replicas whose
    m is fixed): every mechanism charges and noises each replica as a scalar
    call does, one value per replica, and raises nothing (flower-accounted
    raised "truth value of an array is ambiguous"; the sum mechanisms gave
    one std for all)."""
    mech = M.get(name)
    n, m = 40, 20
    q, s = np.array([0.5, 0.5, 1.0]), 1.3
    if name in ("flower", "flower-accounted"):
        q = np.array([0.5, 0.5, 0.5])           # a fixed cohort: m/N itself
    try:
        ch = mech.charge(q, s, n, cohort=m)
    except TypeError:                            # a mechanism whose charge takes no cohort
        pytest.skip(f"{name} charges no given cohort")
    assert ch.size == 3, name
    for i in range(3):
        one = mech.charge(float(q[i]), s, n, cohort=m)
        assert ch.at(i).noise_multiplier == pytest.approx(one.noise_multiplier, rel=1e-12)
        assert ch.at(i).rate == pytest.approx(one.rate, rel=1e-12)
    z = mech.noise(q, s, n, cohort=m)
    if np.ndim(z.std) or z.on in ("sum", "correlated-sum"):
        assert np.shape(z.std) == (3,), name
        one = mech.noise(0.5, s, n, cohort=m)
        assert float(np.asarray(z.std)[0]) == pytest.approx(float(one.std), rel=1e-12)


@pytest.mark.parametrize("name", ["flower", "flower-accounted"])
@pytest.mark.parametrize("q,cohort", [(1.0, 50.0), (0.5, 100.0), (0.5, 49.0),
                                      (np.array([1.0, 1.0]), np.array([50.0, 100.0])),
                                      (np.array([0.5, 0.5, 0.5]), np.array([50.0, 50.0]))])
def test_a_fixed_cohort_given_beside_a_q_that_draws_another_is_refused(name, q, cohort):
    """A fixed-size draw takes m = qN clients: a cohort given that is not qN would charge one cohort and
    release another (flower-accounted charged q = 1 with m = 50 of 100 as every client in the sum: z, not
    z/2, and epsilon 1.91 where the draw's is 4.16).  Refused in one line, by the charge and the noise."""
    mech = M.get(name)
    with pytest.raises(ValueError, match="fixed cohort is m = qN"):
        mech.charge(q, 1.0, 100, cohort=cohort)
    with pytest.raises(ValueError, match="fixed cohort is m = qN"):
        mech.noise(q, 1.0, 100, cohort=cohort)
    # the cohort qN itself, given or not, is charged as the draw it is: z/2 where m < N, z at m = N (accounted)
    assert mech.charge(0.5, 1.0, 100, cohort=50.0) == mech.charge(0.5, 1.0, 100)
    assert mech.charge(0.5, 1.0, 100).noise_multiplier == pytest.approx(math.sqrt(50) / 2)


@pytest.mark.parametrize("name", list(M.names()))
def test_every_mechanism_says_in_one_line_what_its_charge_and_noise_lack(name):
    """No N where the cohort needs it, or a negative noise: a ValueError naming it, never a TypeError from
    deep inside, and never a release of negative noise its charge would refuse."""
    mech = M.get(name)
    for call in (mech.charge, mech.noise):
        try:
            call(0.1, 1.0, None)
        except ValueError as err:
            assert "n_clients" in str(err) or "clients" in str(err), str(err)
        with pytest.raises(ValueError, match="sigma"):
            call(0.5, -1.0, 10)
