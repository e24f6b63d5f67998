"""Behaviour kept across the mechanism-as-object rebuild (issue 36).

``tests/data/behaviour_before_rebuild.json`` was written by this module's
``__main__`` from the code *before* the rebuild (commit be088ac): a spread of
designs for every mechanism with their ε, ε of single accountant calls, and
full-cohort trainings (every client every round) for every algorithm and
client-level mechanism.  The tests recompute them with today's code:

* designs: the same (q, T, σ) and the same ε, to rounding (1e-6 relative);
* accountant calls: the same ε (1e-9 relative);
* full-cohort trainings: every round's test loss and accuracy of every
  replica within a tolerance, the rounds and the ε to rounding (see
  :func:`test_full_cohort_training_within_float_tolerance`).

The trainings' test losses and accuracies (not their rounds or ε) were
written again when the noise sampler changed (issue 44 item 6: float64
Box–Muller, docs/theory.md §5.4), which changes every noise value: from
the code of that change, everything else kept as written from be088ac.

Adap DP-FL's training was written again on 2026-11-26, from the code of
two corrections: its clipped-norm statistic and last step are charged
jointly (ε 3.52 → 5.99 here: they share a batch), and its accuracy and loss
are reported on test samples other than those its noise decay validates on
(``paretofl.fl.algorithms.base.held_out``).

Only the designs listed in :data:`CORRECTED` may differ, and only by
charging more: Flower's accounted mode with fewer than all clients a round
under-reported before (issue 35: an added client can displace a sampled
one, so the sum moves by 2C; the round is now charged a Gaussian of z/2).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

#: the designs were written with the shipped fit of the time, scored on the test split (conftest.py)
pytestmark = pytest.mark.usefixtures("test_scored_shipped_fit")

DATA = Path(__file__).parent / "data" / "behaviour_before_rebuild.json"

#: designs: (name, positional args, keyword args)
DESIGNS = [
    ("default", (100, 2), dict(max_rounds=500)),
    ("small-delta", (100, 1), dict(delta=1e-6, max_rounds=50)),
    ("q-max", (100, 8), dict(max_rounds=1000, q_max=0.3)),
    ("fixed-q", (1000, 2), dict(max_rounds=200, q=0.1)),
    ("cross-device", (10000, 1), dict(max_rounds=1000, q_max=0.01, delta=1e-8)),
    ("kappa-small", (100, 2), dict(max_rounds=500, kappa=3)),
    ("kappa-large", (100, 2), dict(max_rounds=500, sigma_min=0.1, sigma_max=5, kappa=100)),
    ("tight", (20, 0.5), dict(max_rounds=100, delta=1e-3)),
    ("time", (100, 2), dict(time_budget=3600, round_time=60)),
    ("local", (50, 4), dict(max_rounds=100, mechanism="client-local")),
    ("local-fixed-q", (200, 2), dict(max_rounds=300, mechanism="client-local", q=0.5)),
    ("flower", (100, 2), dict(max_rounds=200, framework="flower")),
    ("flower-q", (60, 3), dict(max_rounds=40, q=0.5, framework="flower")),
    ("flower-accounted-all", (100, 2), dict(max_rounds=50, framework="flower-accounted")),
    ("flower-accounted-half", (10, 5), dict(max_rounds=10, q=0.5, framework="flower-accounted")),
    ("flower-accounted-range", (60, 4), dict(max_rounds=40, q_max=0.5, framework="flower-accounted")),
    ("flower-accounted-tenth", (50, 3), dict(max_rounds=50, q=0.1, framework="flower-accounted")),
]

#: group designs: (name, n_clients, budgets as (shares, epsilons) or per-client epsilons, keyword args)
GROUP_DESIGNS = [
    ("shares-aggregate", 100, ([0.6, 0.3, 0.1], [1, 2, 8]), dict(max_rounds=200)),
    ("shares-local", 100, ([0.6, 0.3, 0.1], [1, 2, 8]), dict(max_rounds=200, mechanism="client-local")),
    ("per-client", 30, [0.5, 1, 4] * 10, dict(max_rounds=100, q_max=0.5)),
]

NBAFL = [("nbafl", (50, 60, 0.01, 10, 512), {})]

#: accountant calls: (noise multiplier, rate, steps, delta, sampling)
ACCOUNTS = [(1.1, 0.01, 1000, 1e-5, "poisson"), (0.8, 0.3, 40, 1e-5, "attributed"),
            (2.0, 0.5, 30, 1e-5, "fixed-size"), (3.0, 1.0, 100, 1e-6, "poisson"), (5.0, 0.2, 10, 1e-5, "none")]

#: full-cohort trainings on scikit-learn's digits: (name, algorithm, options)
_RUN = dict(dataset="digits", model="lr", clients=10, rounds=4, replicas=2, seed=3, epsilon=1e6)
TRAININGS = [
    ("aggregate", "dpfedavg", dict(mechanism="client-aggregate", client_rate=1.0, sigma=0.3, clip=1.0, lr=0.5)),
    ("aggregate-adam", "dpfedavg", dict(mechanism="client-aggregate", client_rate=1.0, sigma=0.3, clip=1.0,
                                        lr=0.05, optimizer="adam")),
    ("adaptive", "dpfedavg", dict(mechanism="client-aggregate", client_rate=1.0, sigma=0.3, clip=0.1, lr=0.5,
                                  clip_quantile=0.5, count_noise=2.0)),
    ("local", "dpfedavg", dict(mechanism="client-local", client_rate=1.0, sigma=0.3, clip=1.0, lr=0.5)),
    ("sample", "dpfedavg", dict(mechanism="sample", sigma=1.0, clip=1.0, lr=0.5, batch_rate=0.1, local_steps=2)),
    ("ali-dpfl", "ali-dpfl", dict(sigma=1.0, clip=1.0, lr=0.5, batch_rate=0.1)),
    ("adap-dpfl", "adap-dpfl", dict(sigma=1.0, clip=1.0, lr=0.5, batch_rate=0.1)),
    ("nbafl", "nbafl", dict(clip=10.0, lr=0.05, local_steps=2)),
]

#: designs whose ε may differ from the table, and why (only by charging more)
CORRECTED = {"flower-accounted-half": "issue 35", "flower-accounted-range": "issue 35",
             "flower-accounted-tenth": "issue 35"}

_DESIGN_KEYS = ("q", "rounds", "sigma", "epsilon")


def _design_row(d) -> dict:
    return {k: getattr(d, k) for k in _DESIGN_KEYS}


def _group_row(d) -> dict:
    return {"rounds": d.rounds, "cohort": d.cohort, "sigma": d.sigma,
            "groups": [{k: g[k] for k in ("budget", "clients", "q", "sigma", "epsilon")} for g in d.groups]}


def _budgets(n, spec):
    from paretofl.budgets import Budgets

    if isinstance(spec, tuple):
        return Budgets.shares(spec[0], spec[1], n)
    return Budgets.per_client(spec)


def _nbafl_row(r) -> dict:
    """NbAFL's answers: a dict before the rebuild, a Design of mechanism nbafl after."""
    keys = ("rounds", "clients_per_round", "epsilon_guaranteed_paper", "epsilon_guaranteed_clipping")
    return {k: r[k] for k in keys} if isinstance(r, dict) else {k: r.details[k] for k in keys}


def _training_row(r) -> dict:
    keep = ("round", "replica", "test_loss", "accuracy", "epsilon")
    return {"per_replica": r.per_replica, "history": [{k: h[k] for k in keep} for h in r.history]}


def compute_all() -> dict:
    import paretofl

    out = {"designs": {}, "group_designs": {}, "nbafl": {}, "accounts": [], "trainings": {}}
    for name, args, kw in DESIGNS:
        out["designs"][name] = _design_row(paretofl.design(*args, **kw))
    for name, n, spec, kw in GROUP_DESIGNS:
        out["group_designs"][name] = _group_row(paretofl.design(n, None, budgets=_budgets(n, spec), **kw))
    for name, args, kw in NBAFL:
        out["nbafl"][name] = _nbafl_row(paretofl.nbafl_design(*args, **kw))
    for z, q, steps, delta, sampling in ACCOUNTS:
        out["accounts"].append(paretofl.account(z, q, steps, delta, sampling=sampling).epsilon)
    for name, algorithm, options in TRAININGS:
        out["trainings"][name] = _training_row(paretofl.train(algorithm, **_RUN, **options))
    return out


@pytest.fixture(scope="module")
def before():
    return json.loads(DATA.read_text())


def _close(a, b, rel):
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


@pytest.mark.parametrize("name,args,kw", DESIGNS, ids=[d[0] for d in DESIGNS])
def test_designs_unchanged(before, name, args, kw):
    import paretofl

    # the snapshot predates the local work (issue 46): at the pre-trial's one local epoch the design is the one
    # before (docs/theory.md 4.E); a kappa given measured none, so it is unchanged as it is
    kw = dict(kw, **({} if "kappa" in kw else {"local_epochs": 1}))
    now = _design_row(paretofl.design(*args, **kw))
    old = before["designs"][name]
    if name in CORRECTED:
        # the corrected charge only ever reports more for the same release
        # (or, designing against it, picks a point that spends no more)
        d = paretofl.design(*args, **kw)
        assert d.epsilon <= d.budget * (1 + 1e-12)
        assert d.charged_noise_multiplier <= d.noise_multiplier / 2 * (1 + 1e-12)
        return
    for k in _DESIGN_KEYS:
        assert _close(now[k], old[k], 1e-6), (name, k, now[k], old[k])


@pytest.mark.parametrize("name,n,spec,kw", GROUP_DESIGNS, ids=[d[0] for d in GROUP_DESIGNS])
def test_group_designs_unchanged(before, name, n, spec, kw):
    import paretofl

    now = _group_row(paretofl.design(n, None, budgets=_budgets(n, spec), **kw))
    old = before["group_designs"][name]
    assert now["rounds"] == old["rounds"]
    for k in ("cohort", "sigma"):
        assert _close(now[k], old[k], 1e-6), (name, k)
    for g_now, g_old in zip(now["groups"], old["groups"], strict=True):
        for k, v in g_old.items():
            assert _close(g_now[k], v, 1e-6), (name, k, g_now[k], v)


def test_nbafl_design_unchanged(before):
    import paretofl

    for name, args, kw in NBAFL:
        r = _nbafl_row(paretofl.nbafl_design(*args, **kw))
        for k, v in before["nbafl"][name].items():
            assert _close(r[k], v, 1e-9), (name, k)


def test_accountant_unchanged(before):
    import paretofl

    for (z, q, steps, delta, sampling), old in zip(ACCOUNTS, before["accounts"], strict=True):
        assert _close(paretofl.account(z, q, steps, delta, sampling=sampling).epsilon, old, 1e-9)


#: How far a training may move between machines and thread counts, measured
#: (issue 45): the snapshot was written on one AMD EPYC; on another EPYC the
#: eight trainings' test losses differ from it by at most 1.3e-7 relative
#: (about two float32 ulps; float kernels differ between CPUs), and between 1,
#: 2 and 4 threads (OMP_NUM_THREADS / torch.set_num_threads) on one machine by
#: 0.  A test loss may therefore differ by 1e-4 relative (a margin of ~750 over
#: the measured 1.3e-7, far below what any real change moves: another noise
#: draw, step or clip moves it by more than 1e-2), an accuracy by at most one
#: of the 297 test examples (measured: 0; a loss 1e-7 away can still flip one
#: prediction on a tie).  The accounting stays exact to float64 rounding: the
#: rounds and replicas exactly, ε to 1e-12 relative (measured: one ulp, 1e-16,
#: from the C library's log/exp).
LOSS_REL_TOL = 1e-4
ACCURACY_ABS_TOL = 1.0 / 297 + 1e-7
EPSILON_REL_TOL = 1e-12


def _trainings_agree(now: dict, old: dict) -> list[str]:
    """What differs between two training rows beyond the tolerances above."""
    bad = []
    if len(now["history"]) != len(old["history"]):
        return [f"{len(now['history'])} history rows against {len(old['history'])}"]
    for h, o in zip(now["history"], old["history"], strict=True):
        where = f"round {o['round']} replica {o['replica']}"
        if (h["round"], h["replica"]) != (o["round"], o["replica"]):
            bad.append(f"{where}: row is round {h['round']} replica {h['replica']}")
        if not _close(h["epsilon"], o["epsilon"], EPSILON_REL_TOL):
            bad.append(f"{where}: epsilon {h['epsilon']!r} != {o['epsilon']!r}")
        if not math.isclose(h["test_loss"], o["test_loss"], rel_tol=LOSS_REL_TOL):
            bad.append(f"{where}: test loss {h['test_loss']!r} != {o['test_loss']!r}")
        if abs(h["accuracy"] - o["accuracy"]) > ACCURACY_ABS_TOL:
            bad.append(f"{where}: accuracy {h['accuracy']!r} != {o['accuracy']!r}")
    pn, po = now["per_replica"], old["per_replica"]
    if sorted(pn) != sorted(po) or pn.get("rounds") != po.get("rounds"):
        bad.append(f"per replica: keys or rounds {pn.get('rounds')} != {po.get('rounds')}")
    for a, b in zip(pn.get("epsilon", []), po.get("epsilon", []), strict=True):
        if not _close(a, b, EPSILON_REL_TOL):
            bad.append(f"per replica: epsilon {a!r} != {b!r}")
    for a, b in zip(pn.get("test_loss", []), po.get("test_loss", []), strict=True):
        if not math.isclose(a, b, rel_tol=LOSS_REL_TOL):
            bad.append(f"per replica: test loss {a!r} != {b!r}")
    for a, b in zip(pn.get("accuracy", []), po.get("accuracy", []), strict=True):
        if abs(a - b) > ACCURACY_ABS_TOL:
            bad.append(f"per replica: accuracy {a!r} != {b!r}")
    return bad


@pytest.mark.parametrize("name,algorithm,options", TRAININGS, ids=[t[0] for t in TRAININGS])
def test_full_cohort_training_within_float_tolerance(before, name, algorithm, options):
    """Every round of every replica as before, within what CPUs and threads move.

    Measured (issue 45): 1.3e-7 relative on the test loss between two AMD
    EPYCs, 0 between 1, 2 and 4 threads on one; allowed: 1e-4 relative on the
    loss, one test example of 297 on the accuracy.  Rounds exactly, ε to 1e-12.
    CI runs this a second time with OMP_NUM_THREADS=1 (``.ci/run``).
    """
    pytest.importorskip("torch")
    import paretofl

    now = _training_row(paretofl.train(algorithm, **_RUN, **options))
    old = before["trainings"][name]
    bad = _trainings_agree(now, old)
    assert not bad, f"{name}: " + "; ".join(bad[:5])


def test_the_tolerance_still_catches_a_real_change(before):
    """The tolerance is not so wide that another training passes: a second seed fails."""
    pytest.importorskip("torch")
    import paretofl

    name, algorithm, options = TRAININGS[0]
    other = _training_row(paretofl.train(algorithm, **{**_RUN, "seed": 4}, **options))
    assert _trainings_agree(other, before["trainings"][name])
    nudged = _training_row(paretofl.train(algorithm, **_RUN, **{**options, "sigma": 0.31}))
    assert _trainings_agree(nudged, before["trainings"][name])


if __name__ == "__main__":   # writes the table from the code as it is (run once, before the rebuild)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    DATA.parent.mkdir(exist_ok=True)
    DATA.write_text(json.dumps(compute_all(), indent=1) + "\n")
    print(f"wrote {DATA}")
