"""Pre-trials: the sweep computes what separate runs compute, the store
resumes without losing or repeating a run (also under SIGKILL), the fit
finds a known κ, and the commands chain into `design --fit`."""

import itertools
import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest

import paretofl
from paretofl.pretrial.fit import Results, fit, front_indices
from paretofl.pretrial.spec import Spec
from paretofl.pretrial.store import Store, read_table
from paretofl.pretrial.sweep import Job, plan, run_job, run_sweep
from paretofl.theory import privacy as P
from paretofl.theory.privacy import asymptotic_epsilon, compute_epsilon

PY = sys.executable

SMALL = dict(dataset="digits", public_fraction=1.0, clients=5, model="lr", q=[0.6], sigmas=[0.05, 0.5],
             rounds=[2, 5], seeds=2, clip=0.5, lr=0.2, batch_size=32)


def small(**kw):
    return Spec.from_dict({**SMALL, **kw})


def rows_of(path):
    tab = read_table(path)
    return {(s, int(t), q, int(k)): (l, a) for s, t, q, k, l, a in
            zip(tab["sigma"], tab["rounds"], tab["q"], tab["seed"], tab["test_loss"], tab["accuracy"])}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The small spec run uninterrupted, in one job per (q, rounds) group."""
    path = tmp_path_factory.mktemp("ref") / "ref.sqlite"
    run_sweep(small(), path, progress=False)
    return rows_of(path)


# ---------------------------------------------------------------- the sweep
def test_prefix_of_a_longer_run_is_the_shorter_run(reference):
    """A run of T rounds evaluated inside a longer job equals the T-round
    run trained on its own, alone (another job, other replicas absent)."""
    spec = small()
    for sigma, seed in [(0.5, 1), (0.0, 0)]:
        rows = run_job(spec, Job(0.6, [(sigma, seed)], [2]))
        assert len(rows) == 1
        loss, acc = reference[(sigma, 2, 0.6, seed)]
        assert rows[0]["test_loss"] == pytest.approx(loss, rel=1e-5, abs=1e-6)
        assert rows[0]["accuracy"] == pytest.approx(acc)


def test_a_job_on_either_device_evaluates_its_prefix_as_the_shorter_run(device):
    """The sweep's device setting: a job's T = 2 row, evaluated inside a
    5-round job, equals a 2-round job alone on the same device."""
    spec = small(device=device)
    long = run_job(spec, Job(0.6, [(0.5, 1), (0.05, 0)], [2, 5]))
    short = run_job(spec, Job(0.6, [(0.5, 1), (0.05, 0)], [2]))
    assert len(long) == 4 and len(short) == 2
    pick = {(r["sigma"], r["seed"]): r for r in long if r["rounds"] == 2}
    for r in short:
        assert r["test_loss"] == pytest.approx(pick[(r["sigma"], r["seed"])]["test_loss"], rel=1e-5)
        assert r["accuracy"] == pytest.approx(pick[(r["sigma"], r["seed"])]["accuracy"])


def test_rows_carry_both_privacy_figures(tmp_path):
    path = tmp_path / "r.sqlite"
    run_sweep(small(seeds=1, sigmas=[0.7]), path, progress=False)
    tab = read_table(path)
    for s, t, q, e, ea in zip(tab["sigma"], tab["rounds"], tab["q"], tab["epsilon"], tab["epsilon_asymptotic"]):
        if s == 0:
            assert math.isinf(e) and math.isinf(ea)
        else:  # aggregate view: noise multiplier sigma * sqrt(qN)
            assert e == pytest.approx(compute_epsilon(q, s * math.sqrt(q * 5), int(t), 1e-5), rel=1e-9)
            assert ea == pytest.approx(asymptotic_epsilon(s, t, q, 5, 1e-5))


def test_sweep_resumes_and_a_finished_sweep_costs_nothing(tmp_path, reference):
    path = tmp_path / "r.sqlite"
    spec = small(chunk=2)
    first = run_sweep(spec, path, progress=False, max_jobs=1)
    assert 0 < first["runs_added"] < len(spec.configurations())
    rest = run_sweep(spec, path, progress=False)
    assert rest["jobs"] == len(plan(spec, set())) - 1
    again = run_sweep(spec, path, progress=False)
    assert again["jobs"] == 0 and again["runs_added"] == 0
    got = rows_of(path)
    assert set(got) == set(reference) and len(got) == len(spec.configurations())
    for k, (loss, acc) in reference.items():
        assert got[k][0] == pytest.approx(loss, rel=1e-5, abs=1e-6)


def test_growing_the_grid_trains_only_the_new_runs(tmp_path):
    path = tmp_path / "r.sqlite"
    run_sweep(small(seeds=1), path, progress=False)
    n = len(rows_of(path))
    s = run_sweep(small(seeds=1, sigmas=[0.05, 0.5, 1.0]), path, progress=False)
    assert s["runs_added"] == 2 and len(rows_of(path)) == n + 2  # one sigma x two T x one seed


def test_sweep_killed_with_sigkill_resumes_to_the_same_result(tmp_path):
    """Kill a real `paretofl pretrial` process again and again, each time a
    random instant after it committed a job; afterwards every (sigma, T, q,
    seed) is there exactly once, with the values of an uninterrupted sweep."""
    grid = {**SMALL, "sigmas": [0.05, 0.2, 0.5, 1.0, 2.0], "rounds": [2, 5, 30], "chunk": 1}  # 12 jobs
    spec = Spec.from_dict(grid)
    ref_path = tmp_path / "ref.sqlite"
    run_sweep(spec, ref_path, progress=False)
    # a job's time on this machine, warm (a second sweep of the grid): the
    # kills land within about one job of a commit however fast the machine
    # (a fixed 0.4 s let a fast CPU finish the sweep in four starts)
    t = time.perf_counter()
    run_sweep(spec, tmp_path / "timing.sqlite", progress=False)
    job_s = (time.perf_counter() - t) / len(plan(spec, set()))
    reference = rows_of(ref_path)
    path = tmp_path / "killed.sqlite"
    spec_file = tmp_path / "s.toml"
    spec_file.write_text("\n".join(f"{k} = {json.dumps(v)}" for k, v in grid.items()))
    cmd = [PY, "-m", "paretofl.cli", "pretrial", str(spec_file), "--out", str(path), "--json"]
    rng = np.random.default_rng(7)

    def count():
        try:
            return len(rows_of(path)) if path.exists() else 0
        except ValueError as exc:   # polled between the writer creating the file and its tables
            if "no runs table" in str(exc) or "it is empty" in str(exc):
                return 0
            raise

    kills, seen = 0, [0]
    for _ in range(30):
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        start = count()
        while p.poll() is None and count() == start:
            time.sleep(0.02)
        first = count()
        time.sleep(float(rng.uniform(0.0, job_s)))  # somewhere inside the next job (or its commit)
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            kills += 1
        p.wait()
        seen.append(count())
        if seen[-1] - first > len(grid["rounds"]):   # more than one job (one replica's rounds) passed:
            job_s /= 2                               # the machine got faster than when job_s was timed
        if p.returncode == 0:
            break
    print(f"\nSIGKILL test: {kills} kills over {len(seen) - 1} starts, rows after each: {seen}")
    assert kills >= 5, f"only {kills} kills: the sweep is too short for this test"
    assert all(a <= b for a, b in zip(seen, seen[1:])), f"a finished run was lost: {seen}"
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    db = sqlite3.connect(path)
    total, distinct = db.execute("SELECT COUNT(*), COUNT(DISTINCT printf('%g/%d/%g/%d', sigma, rounds, q, seed)) "
                                 "FROM runs").fetchone()
    db.close()
    assert total == distinct == len(spec.configurations())
    got = rows_of(path)
    assert set(got) == set(reference)
    for k, (loss, _) in reference.items():
        assert got[k][0] == pytest.approx(loss, rel=1e-5, abs=1e-6)


# ---------------------------------------------------------------- the store
def test_store_refuses_foreign_truncated_and_other_spec_files(tmp_path):
    text = tmp_path / "notes.sqlite"
    text.write_text("hello, this is not a database\n" * 100)
    with pytest.raises(ValueError, match="not a paretofl results file"):
        Store(text)
    other = tmp_path / "other.sqlite"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE t (x)")
    db.commit()
    db.close()
    with pytest.raises(ValueError, match="not a paretofl results file"):
        Store(other)
    good = tmp_path / "good.sqlite"
    run_sweep(small(seeds=1, sigmas=[0.5], rounds=[2]), good, progress=False)
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(good.read_bytes()[:1500])
    with pytest.raises(ValueError, match="results file"):
        Store(cut).table()
    with pytest.raises(ValueError, match="different spec"):
        Store(good, small(lr=0.3).base())
    with pytest.raises(ValueError, match="does not exist"):
        Store(tmp_path / "absent.sqlite")


# ---------------------------------------------------------------- the spec
@pytest.mark.parametrize("bad,match", [
    ({"sigmas": [0.5, float("nan")]}, "sigmas"), ({"rounds": [0, 4]}, "rounds"), ({"rounds": [2.5]}, "rounds"),
    ({"q": [1.5]}, "q"), ({"q": [0.1]}, "fewer than one client"), ({"clip": -1}, "clip"),
    ({"model": "resnet"}, "model"), ({"colour": "red"}, "unknown field"), ({"seeds": "five"}, "seeds"),
    ({"sigmas": [0.5, 0.5]}, "twice"), ({"delta": 1.0}, "delta"), ({"lr": float("inf")}, "lr"),
    ({"sigmas": []}, "at least one"), ({"clients": True}, "clients")])
def test_spec_rejects_bad_values_with_a_sentence(bad, match):
    with pytest.raises(ValueError, match=match):
        small(**bad)


# ---------------------------------------------------------------- the fit
def synthetic_store(path, kappa, q=0.5, n=20, seeds=3, noise=0.0, sigmas=None, rounds=None, bend=0.0):
    """A store whose test loss follows the bound (1.2) exactly:
    loss = 1/T + kappa sigma^2/(qN) (+ bend sigma^2 T/(qN)) (+ seed noise),
    reference loss 0."""
    spec = Spec.from_dict(dict(dataset="digits", model="lr", clients=n, q=[q], sigmas=[1.0], rounds=[1], seeds=seeds))
    st = Store(path, spec.base())
    rng = np.random.default_rng(1)
    sigmas = np.geomspace(0.3, 3, 25) if sigmas is None else sigmas
    rounds = np.unique(np.geomspace(2, 400, 30).astype(int)) if rounds is None else rounds
    rows = []
    orders = P.DEFAULT_ORDERS
    curves = {s: P.rdp_subsampled_gaussian(q, s * math.sqrt(q * n), orders) for s in sigmas}
    for s, t, k in itertools.product([0.0, *sigmas], rounds, range(seeds)):
        loss = 0.0 if s == 0 else 1 / t + kappa * s * s / (q * n) + bend * s * s * t / (q * n) + \
            noise * rng.standard_normal()
        eps = math.inf if s == 0 else P.rdp_to_epsilon(orders, int(t) * curves[s], 1e-5)[0]
        rows.append(dict(sigma=s, rounds=int(t), q=q, seed=k, test_loss=loss, accuracy=0.5, epsilon=eps,
                         epsilon_asymptotic=math.inf if s == 0 else asymptotic_epsilon(s, t, q, n, 1e-5),
                         seconds=0.0))
    st.add_rows(rows)
    st.close()


def brute_force_front(u, e):
    """O(n^2) non-dominated filter, independent of pymoo."""
    keep = []
    for i in range(len(u)):
        dominated = any((u[j] <= u[i] and e[j] <= e[i]) and (u[j] < u[i] or e[j] < e[i]) for j in range(len(u)))
        if not dominated:
            keep.append(i)
    return keep


@pytest.mark.parametrize("kappa", [0.05, 0.5, 4.0])
def test_fit_recovers_kappa_and_slope_from_the_bound(tmp_path, kappa):
    path = tmp_path / "syn.sqlite"
    synthetic_store(path, kappa, sigmas=np.geomspace(0.05, 20, 40), rounds=np.unique(np.geomspace(1, 3000, 60)
                                                                                        .astype(int)))
    r = fit(path, epsilon="asymptotic", bootstrap=0)
    # the grid's resolution bounds the error: 40 sigmas and ~55 T over these ranges
    assert abs(math.log(r.kappa / kappa)) < 0.15
    assert r.slope == pytest.approx(-2.0, abs=0.15)


def test_front_is_the_set_of_non_dominated_configurations(tmp_path):
    path = tmp_path / "syn.sqlite"
    synthetic_store(path, 0.3, noise=0.05, sigmas=np.geomspace(0.3, 3, 8), rounds=[2, 5, 10, 20, 50, 100])
    res = Results(path)
    u = res.mean_utility()
    for eps_kind in ("exact", "asymptotic"):
        idx = front_indices(res, u, eps_kind)
        assert sorted(idx.tolist()) == brute_force_front(u, res.leakage(eps_kind))


def test_bootstrap_interval_covers_the_estimate_and_shrinks_with_seeds(tmp_path):
    noisy = tmp_path / "noisy.sqlite"
    synthetic_store(noisy, 0.3, noise=0.02, seeds=8, sigmas=np.geomspace(0.3, 3, 10),
                    rounds=[2, 4, 8, 16, 32, 64, 128])
    r = fit(noisy, bootstrap=300)
    lo, hi = r.kappa_ci
    assert lo <= r.kappa <= hi and lo < hi
    exact = tmp_path / "exact.sqlite"
    synthetic_store(exact, 0.3, noise=0.0, seeds=4, sigmas=np.geomspace(0.3, 3, 10),
                    rounds=[2, 4, 8, 16, 32, 64, 128])
    r0 = fit(exact, bootstrap=100)
    assert r0.kappa_ci[0] == pytest.approx(r0.kappa_ci[1])  # seeds agree: no spread


def test_utility_loss_is_taken_against_the_same_seed(tmp_path):
    """Shifting every run of one seed (σ = 0 included) leaves the utility
    losses unchanged: the reference is per seed."""
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    synthetic_store(a, 0.3, noise=0.01, seeds=3, sigmas=[0.5, 1.0], rounds=[2, 8])
    synthetic_store(b, 0.3, noise=0.01, seeds=3, sigmas=[0.5, 1.0], rounds=[2, 8])
    db = sqlite3.connect(b)
    db.execute("UPDATE runs SET test_loss = test_loss + 7 WHERE seed = 1")
    db.commit()
    db.close()
    assert np.allclose(Results(a).U, Results(b).U)


# ---------------------------------------------------------------- commands
def test_pretrial_fit_plot_design_chain(tmp_path, capsys):
    from paretofl.cli import main

    res, fitf = tmp_path / "p.sqlite", tmp_path / "p_fit.json"
    args = ["pretrial", "--dataset", "digits", "--model", "lr", "--public-fraction", "1", "--clients", "5", "--q", "0.6",
            "--sigmas", "0.05", "0.2", "0.8", "--rounds", "2", "4", "8", "--seeds", "2", "--clip", "0.5",
            "--out", str(res), "--json"]
    assert main(args) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["runs_added"] == s["runs_in_spec"] == 4 * 3 * 2
    assert main(["fit", str(res), "--out", str(fitf), "--bootstrap", "50", "--json"]) == 0
    f = json.loads(capsys.readouterr().out)
    assert {"kappa", "kappa_ci", "slope", "slope_ci", "n_runs", "front"} <= set(f)
    assert f["n_runs"] == 24 and all(len(p) == 5 for p in f["front"])
    assert json.loads(fitf.read_text())["kappa"] == f["kappa"]
    # the front's configurations are ones that ran, with their measured epsilon
    for sigma, t, q, u, eps in f["front"]:
        assert eps == pytest.approx(compute_epsilon(q, sigma * math.sqrt(q * 5), t, 1e-5), rel=1e-9)
    assert main(["design", "--clients", "100", "--budget", "4", "--max-rounds", "200", "--fit", str(fitf),
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kappa"] == pytest.approx(f["kappa"])
    assert main(["plot", str(res), "--fit", str(fitf), "--out-dir", str(tmp_path), "--json"]) == 0
    paths = json.loads(capsys.readouterr().out)["plots"]
    assert len(paths) == 3 and all(os.path.getsize(p) > 10_000 for p in paths)


def test_validate_reports_transfer_and_cost(tmp_path):
    from paretofl.validate import validate

    spec = small(public_fraction=0.4, sigmas=[0.05, 0.2, 0.8], rounds=[2, 4, 8])
    r = validate(spec, tmp_path, full_fraction=1.0, progress=False, bootstrap=30)
    assert r["kappa_transfer_error"] == pytest.approx(abs(math.log(r["kappa_public"] / r["kappa_full"])))
    assert r["design"]["epsilon"] <= r["budget"] * (1 + 1e-9)
    assert r["design"]["epsilon_check"] == pytest.approx(r["design"]["epsilon"], rel=1e-9)
    c = r["cost"]
    assert c["method"]["full_trainings"] == 1 and c["training_with_budget"]["full_trainings"] == 3
    assert c["training_until_convergence"]["seconds"] >= c["training_with_budget"]["seconds"]
    assert any("kappa public" in line for line in r["report"])


def test_ray_executor_gives_the_local_result(tmp_path, reference, monkeypatch):
    """The built-in model, and a user's factory that Ray's workers import
    from the driver's working folder: the same rows as a local sweep."""
    ray = pytest.importorskip("ray")
    (tmp_path / "ray_user_model.py").write_text(
        "from torch import nn\n\n"
        "def mlp(in_shape, n):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, n))\n")
    monkeypatch.chdir(tmp_path)
    user = small(model="ray_user_model:mlp", sigmas=[0.5], rounds=[2, 3], seeds=2, chunk=2)
    run_sweep(user, tmp_path / "user_local.sqlite", progress=False)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        path = tmp_path / "ray.sqlite"
        s = run_sweep(small(chunk=3), path, executor="ray", progress=False)
        run_sweep(user, tmp_path / "user_ray.sqlite", executor="ray", progress=False)
    finally:
        ray.shutdown()
    assert s["runs_added"] == len(reference)
    got = rows_of(path)
    for k, (loss, _) in reference.items():
        assert got[k][0] == pytest.approx(loss, rel=1e-5, abs=1e-6)
    local, remote = rows_of(tmp_path / "user_local.sqlite"), rows_of(tmp_path / "user_ray.sqlite")
    assert len(local) == 8 and local.keys() == remote.keys()
    for k, (loss, _) in local.items():
        assert remote[k][0] == pytest.approx(loss, rel=1e-5, abs=1e-6)


def test_a_diverged_run_is_kept_as_infinitely_bad(tmp_path):
    """NaN losses are stored as +inf (SQLite would make NaN a NULL and the
    run would be lost and retrained forever)."""
    st = Store(tmp_path / "r.sqlite", small().base())
    st.add_rows([dict(sigma=2.0, rounds=4, q=0.6, seed=0, test_loss=float("nan"), accuracy=0.1, epsilon=1.0,
                      epsilon_asymptotic=1.0, seconds=0.1)])
    assert len(st) == 1 and math.isinf(st.table()["test_loss"][0])
    st.close()


# ---------------------------------------------------------------- fuzzing the spec
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as hs  # noqa: E402

_values = hs.one_of(hs.none(), hs.booleans(), hs.integers(-10**6, 10**6),
                    hs.floats(allow_nan=True, allow_infinity=True), hs.text(max_size=8),
                    hs.lists(hs.one_of(hs.floats(allow_nan=True), hs.integers(-5, 500), hs.text(max_size=3)),
                             max_size=4))


@settings(max_examples=300, deadline=None)
@given(hs.dictionaries(hs.sampled_from(sorted(SMALL) + ["seeds", "chunk", "delta", "beta", "partition",
                                                         "local_epochs", "data_seed", "bogus"]), _values,
                       max_size=5))
def test_spec_fuzz_is_valid_or_one_sentence(overrides):
    """Any mix of wrong types, NaN, inf, out-of-range or unknown fields: a
    valid spec or a ValueError naming the problem, never another exception."""
    try:
        spec = Spec.from_dict({**SMALL, **overrides})
    except ValueError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert all(math.isfinite(s) and s > 0 for s in spec.sigmas)
    assert all(isinstance(t, int) and t >= 1 for t in spec.rounds)
    assert all(0 < q <= 1 and q * spec.clients >= 1 for q in spec.q)


def test_validate_command_json_and_bad_input(tmp_path, capsys):
    from paretofl.cli import main

    base = ["validate", "--dataset", "digits", "--model", "lr", "--public-fraction", "0.4", "--clients", "5", "--q", "0.6",
            "--sigmas", "0.05", "0.3", "--rounds", "2", "4", "--seeds", "2", "--out-dir", str(tmp_path)]
    assert main(base + ["--budget", "80", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["budget"] == 80 and r["design"]["epsilon"] <= 80 * (1 + 1e-9)
    assert {"kappa_public", "kappa_full", "kappa_transfer_error", "cost"} <= set(r)
    assert main(base + ["--full-fraction", "0.2"]) == 2  # below the public fraction
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "full fraction" in err


def test_fit_never_imports_torch(tmp_path):
    """`paretofl fit` reads the store only: it must start without torch."""
    path = tmp_path / "syn.sqlite"
    synthetic_store(path, 0.3, sigmas=[0.5, 1.0, 2.0], rounds=[2, 8, 32])
    code = ("import sys; from paretofl.cli import main; "
            f"rc = main(['fit', {str(path)!r}, '--bootstrap', '20', '--json']); "
            "assert rc == 0; assert 'torch' not in sys.modules, 'torch imported'")
    r = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------- issue-19 regressions
def test_two_processes_on_one_store_share_the_work(tmp_path):
    """Two `paretofl pretrial` processes started together on one store: each
    claims the replicas of a job before training it, so together they train
    every run exactly once (an earlier version had both train everything)."""
    grid = {**SMALL, "sigmas": [0.05, 0.2, 0.5, 1.0, 2.0], "rounds": [2, 5, 15], "chunk": 1}
    spec_file = tmp_path / "s.toml"
    spec_file.write_text("\n".join(f"{k} = {json.dumps(v)}" for k, v in grid.items()))
    path = tmp_path / "shared.sqlite"
    run_sweep(Spec.from_dict(grid), tmp_path / "empty.sqlite", progress=False, max_jobs=0)  # warm the data cache
    cmd = [PY, "-m", "paretofl.cli", "pretrial", str(spec_file), "--out", str(path), "--json"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    summaries = [json.loads(o[0]) for o in outs]
    n = len(Spec.from_dict(grid).configurations())
    assert sum(s["runs_trained"] for s in summaries) == n        # nothing trained twice
    assert len(rows_of(path)) == n
    db = sqlite3.connect(path)
    assert db.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0   # every claim released
    db.close()


def test_a_dead_processs_claims_are_taken_over(tmp_path):
    """A claim left by a process that is gone (SIGKILL) does not block the work."""
    spec = small()
    path = tmp_path / "c.sqlite"
    st = Store(path, spec.base())
    job = plan(spec, set())[0]
    st.db.execute("INSERT INTO claims VALUES (?, ?, ?, ?, ?, ?)",
                  (round(job.replicas[0][0], 12), job.q, job.replicas[0][1], __import__("socket").gethostname(),
                   2**22 + 12345, 0.0))                                    # a pid that is not running
    st.db.commit()
    st.close()
    s = run_sweep(spec, path, progress=False)
    assert s["runs_total"] == len(spec.configurations()) and s["replicas_left_to_others"] == 0


@pytest.mark.parametrize("override", [{"device": "cuda"}, {"clients": 5000}])
def test_a_failed_pretrial_leaves_no_store(tmp_path, override):
    """A spec that cannot run (no GPU for device cuda; more clients than
    samples) fails before the store is made, so the corrected spec can use
    the same file."""
    import torch

    if override.get("device") == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    path = tmp_path / "p.sqlite"
    with pytest.raises(ValueError):
        run_sweep(small(**override), path, progress=False)
    assert not path.exists()
    run_sweep(small(), path, progress=False)
    assert len(rows_of(path)) == len(small().configurations())


def test_an_empty_store_takes_another_spec(tmp_path):
    path = tmp_path / "e.sqlite"
    Store(path, small(lr=0.3).base()).close()            # made, then nothing trained
    run_sweep(small(), path, progress=False)
    assert len(rows_of(path)) == len(small().configurations())


def test_an_unreachable_ray_cluster_is_refused_quickly(tmp_path):
    pytest.importorskip("ray")
    t = time.perf_counter()
    with pytest.raises(ValueError, match=r"cannot reach a Ray cluster at 127.0.0.1:1 \(Connection refused\)"):
        run_sweep(small(), tmp_path / "r.sqlite", executor="ray", ray_address="127.0.0.1:1", progress=False)
    assert time.perf_counter() - t < 30
    assert not (tmp_path / "r.sqlite").exists()                 # no empty store left behind


@pytest.mark.parametrize("command", ["train", "pretrial"])
def test_ctrl_c_is_one_line_exit_130_and_keeps_what_was_done(tmp_path, command):
    """SIGINT in the middle: one line on stderr, exit code 130; train's
    history keeps the rounds it finished, pretrial's store the jobs."""
    if command == "train":
        out = tmp_path / "h.csv"
        cmd = [PY, "-m", "paretofl.cli", "train", "--dataset", "digits", "--model", "lr", "--clients", "4",
               "--rounds", "100000", "--epsilon", "1e6", "--batch-rate", "0.2", "--history", str(out)]

        def progress():
            return len(out.read_text().splitlines()) - 1 if out.exists() else 0
    else:
        out = tmp_path / "p.sqlite"
        grid = {**SMALL, "sigmas": [0.05, 0.2, 0.5, 1.0, 2.0], "rounds": [2, 5, 400], "chunk": 1}
        spec_file = tmp_path / "s.toml"
        spec_file.write_text("\n".join(f"{k} = {json.dumps(v)}" for k, v in grid.items()))
        cmd = [PY, "-m", "paretofl.cli", "pretrial", str(spec_file), "--out", str(out)]

        def progress():
            try:
                return len(rows_of(out)) if out.exists() else 0
            except ValueError:
                return 0
    # SIGINT at its default in the child: a shell's background job (`make test &`)
    # ignores it, the child would inherit that, and Python would then raise no
    # KeyboardInterrupt for it
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 240
    while progress() < 3 and time.time() < deadline and p.poll() is None:
        time.sleep(0.05)
    done = progress()
    p.send_signal(signal.SIGINT)
    try:
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:     # it did not stop: leave no process behind
            p.kill()
    assert p.returncode == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "interrupted" in lines[0] and "Traceback" not in err
    assert progress() >= done >= 3


def test_fit_names_what_is_wrong_with_a_degenerate_store(tmp_path):
    """Two seeds (no interval), a diverged pre-trial, infinite losses: the
    fit says what is wrong instead of recommending."""
    from paretofl.cli import main

    two = tmp_path / "two.sqlite"
    synthetic_store(two, 0.3, noise=0.01, seeds=2, sigmas=np.geomspace(0.3, 3, 6), rounds=[2, 4, 8, 16, 32])
    r = fit(two, bootstrap=50)
    assert any("2 seeds" in p for p in r.problems)
    diverged = tmp_path / "div.sqlite"
    synthetic_store(diverged, 0.3, noise=0.01, seeds=4, sigmas=np.geomspace(0.3, 3, 6), rounds=[2, 4, 8, 16, 32])
    db = sqlite3.connect(diverged)
    db.execute("UPDATE runs SET test_loss = 400 + 0.001 * rounds WHERE sigma > 0")
    db.execute("UPDATE runs SET test_loss = 'Infinity' WHERE sigma > 1 AND rounds >= 4")
    db.commit()
    db.close()
    r = fit(diverged, bootstrap=50)
    text = " ".join(r.problems)
    assert "diverged" in text and "infinite" in text
    good = tmp_path / "good.sqlite"
    synthetic_store(good, 0.3, noise=0.01, seeds=5, sigmas=np.geomspace(0.3, 3, 8), rounds=[2, 4, 8, 16, 32, 64])
    assert fit(good, bootstrap=100).problems == []
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["fit", str(diverged), "--out", str(tmp_path / "d_fit.json"), "--bootstrap", "20"]) == 0
    assert "problem:" in buf.getvalue() and "paretofl design --fit" not in buf.getvalue()


# ---------------------------------------------------------------- the empirical mode
@pytest.mark.parametrize("bend", [0.0, 0.02])
def test_utility_models_recover_the_loss_and_the_preferred_one(tmp_path, bend):
    """On stores whose loss follows the bound, or the bound plus a term
    growing with sigma^2 T, the fitted models recover the constants and the
    held-out seeds prefer the right one."""
    from paretofl.pretrial.fit import fit_utility

    path = tmp_path / "u.sqlite"
    synthetic_store(path, 0.3, noise=0.002, seeds=4, sigmas=np.geomspace(0.2, 3, 8), rounds=[2, 4, 8, 16, 32, 64],
                    bend=bend)
    r = fit_utility(path)
    m = r["models"]["bend" if bend else "bound"]
    assert m.a == pytest.approx(1.0, rel=0.05) and m.b == pytest.approx(0.3, rel=0.05)
    assert r["preferred"] == ("bend" if bend else "bound")
    if bend:
        assert m.d == pytest.approx(bend, rel=0.1)


def test_empirical_design_is_the_best_point_of_its_model_within_budget(tmp_path):
    """design(from_store=...) minimises the fitted model under the exact
    accountant: no point of a brute-force (σ, T) scan with the same model
    and the same ε constraint does better."""
    from paretofl.pretrial.fit import fit_utility

    path = tmp_path / "u.sqlite"
    synthetic_store(path, 0.3, noise=0.002, seeds=4, sigmas=np.geomspace(0.2, 3, 8), rounds=[2, 4, 8, 16, 32, 64],
                    bend=0.02)
    model = fit_utility(path)["models"]["bend"]
    n, eps, t_cap = 50, 3.0, 120
    d = paretofl.design(n_clients=n, epsilon=eps, max_rounds=t_cap, q=1.0, from_store=str(path))
    assert d.utility_model == "bend" and d.epsilon <= eps
    assert d.predicted_utility_loss == pytest.approx(float(model.predict(d.sigma, d.rounds, 1.0, n)))
    orders = P.DEFAULT_ORDERS
    best = math.inf
    for s in np.geomspace(0.3, 30, 600):
        curve = P.rdp_subsampled_gaussian(1.0, s * math.sqrt(n), orders)
        for t in range(1, t_cap + 1):
            if P.rdp_to_epsilon(orders, t * curve, 1e-5)[0] <= eps:
                best = min(best, float(model.predict(s, t, 1.0, n)))
    assert d.predicted_utility_loss <= best * (1 + 1e-3)
    with pytest.raises(ValueError, match="one of kappa"):
        paretofl.design(n_clients=n, epsilon=eps, max_rounds=t_cap, kappa=0.1, from_store=str(path))


def test_fit_says_where_the_front_disagrees_with_the_relation(tmp_path):
    """The shipped LR store (its front's T off the relation's by a factor
    3 on average) gets a problem naming it and the empirical mode; LeNet's
    (a factor 1.9) none; a store whose losses follow the bound exactly none
    either (a factor 2: the grid's steps)."""
    from pathlib import Path

    from paretofl.cli import main

    root = Path(__file__).resolve().parents[2] / "pretrials"
    lr = fit(root / "lr_fmnist.sqlite", bootstrap=200)
    text = " ".join(lr.problems)
    assert "disagrees" in text and f"{lr.distance:.2f}" in text and "--from-store" in text
    assert not any("disagrees" in p for p in fit(root / "lenet_fmnist.sqlite", bootstrap=200).problems)
    good = tmp_path / "good.sqlite"
    synthetic_store(good, 0.3, noise=0.01, seeds=5, sigmas=np.geomspace(0.3, 3, 8), rounds=[2, 4, 8, 16, 32, 64])
    assert fit(good, bootstrap=100).problems == []
    import contextlib
    import io
    import json as _json

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["fit", str(root / "lr_fmnist.sqlite"), "--out", str(tmp_path / "f.json"), "--bootstrap", "0",
                     "--json"]) == 0
    d = _json.loads(buf.getvalue(), parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    assert d["kappa_ci"] == [None, None] and any("no bootstrap" in p for p in d["problems"])


def test_an_interrupted_job_keeps_the_rounds_it_evaluated(tmp_path, monkeypatch):
    """Ctrl-C inside a job (the demo's pre-trial is a single job) keeps every
    T of the grid evaluated so far, releases the job's claims, and a rerun
    trains only what is missing, to the same numbers."""
    spec = small(seeds=1, sigmas=[0.7], rounds=[1, 2, 3])
    path = tmp_path / "r.sqlite"
    calls = []
    real = Store.add_rows

    def add_then_stop(self, rows, release=()):
        real(self, rows, release)
        calls.append(len(rows))
        if len(calls) == 2:          # after T = 1 and T = 2 are stored
            raise KeyboardInterrupt

    monkeypatch.setattr(Store, "add_rows", add_then_stop)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, path, progress=False)
    monkeypatch.setattr(Store, "add_rows", real)
    kept = rows_of(path)
    assert sorted({t for _, t, _, _ in kept}) == [1, 2] and len(kept) == 4      # σ 0.7 and the reference
    s = run_sweep(spec, path, progress=False)
    assert s["runs_total"] == 6 and s["runs_trained"] == 2
    full = rows_of(path)
    assert all(full[k] == kept[k] for k in kept) and sorted({t for _, t, _, _ in full}) == [1, 2, 3]
    run_sweep(spec, tmp_path / "whole.sqlite", progress=False)
    whole = rows_of(tmp_path / "whole.sqlite")
    assert set(whole) == set(full)
    for k in whole:
        assert full[k][0] == pytest.approx(whole[k][0], rel=1e-6) and full[k][1] == whole[k][1]


def test_an_empty_spec_file_is_refused_and_nothing_is_written(tmp_path, monkeypatch, capsys):
    from paretofl.cli import main

    (tmp_path / "empty.toml").write_text("\n# nothing here\n")
    monkeypatch.chdir(tmp_path)
    assert main(["pretrial", "empty.toml", "--out", "e.sqlite"]) == 2
    assert "spec file empty.toml is empty" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.toml"]


def test_a_store_caught_between_its_schema_and_its_first_commit_reads_as_empty_and_a_writer_resumes_it(tmp_path):
    """A writer killed (or polled) after creating the tables and before
    writing the format: a reader is told the file is empty, not that it is
    some other file, and a writer opening it finishes the creation."""
    from paretofl.pretrial.store import _SCHEMA

    path = tmp_path / "half.sqlite"
    db = sqlite3.connect(path)
    db.executescript(_SCHEMA)
    db.close()
    with pytest.raises(ValueError, match=r"is not a paretofl results file \(it is empty\)"):
        Store(path)
    s = Store(path, {"model": "lr"})
    assert s.base == {"model": "lr"} and len(s) == 0
    s.close()
    assert Store(path).base == {"model": "lr"}


def test_a_spec_names_label_shards_per_client_and_a_tuning_trains_them():
    """"shards:K" gives each client K label shards (about K labels); the
    spec, and so the store and a tuning read from it, says so (plain
    "shards" cuts 400 in all: near IID over 10 clients). An analysis once
    patched the partition into a cache, and a tuning on its store then
    trained the near-IID split."""
    from paretofl.pretrial import sweep
    from paretofl.pretrial.spec import Spec

    base = dict(dataset="digits", public_fraction=0.5, clients=10, model="lr", q=[1.0], sigmas=[1.0], rounds=[2],
                seeds=1)
    two = sweep.prepared(Spec.from_dict(dict(base, partition="shards:2")))
    y = two.data.y_train.numpy()
    assert max(len(set(y[p])) for p in two.parts) <= 4           # two shards of sorted labels, each over two at most
    plain = sweep.prepared(Spec.from_dict(dict(base, partition="shards")))
    assert min(len(set(y[p])) for p in plain.parts) >= 5
    assert Spec.from_dict(dict(base, partition="shards:2")).base()["partition"] == "shards:2"
    with pytest.raises(ValueError, match="shards:K"):
        Spec.from_dict(dict(base, partition="shards:0"))
