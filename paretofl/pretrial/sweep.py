"""Run a pre-trial: every (σ, T, q, seed) of a spec, batched through the
engine, each finished run a row in the store (docs/theory.md §4, Gu et al. Alg. 2).

Work is cut into *jobs*: a job trains up to ``spec.chunk`` replicas — each a
(σ, seed) at one q — side by side in one engine, for the largest T any of
them still needs, and evaluates the test loss after every T of the grid.  A
run of T rounds is the first T rounds of the longer run with the same seed
(nothing in the round depends on the total), so one training covers a whole
column of the grid; a test checks this against separate runs.  Replicas with
the same seed share their random streams (client selection, initial model,
batches): σ = 0, the non-private reference, sees the same draws as every σ.
A private pre-trial is a real release on the clients' data: there every
replica's generators come from the operating system's entropy, never from
its seed (two runs sharing noise would give back the noiseless sum:
y₁ = S + z₁W, y₂ = S + z₂W), and the seed only labels the replica.

Executors: in-process (default) or Ray (``executor="ray"``): jobs are pure
functions of (spec, job); only the driver writes to the store.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

from ..progress import Progress
from ..shell import command_path
from .spec import MECHANISM, Spec
from .store import Store, run_key


@dataclass
class Job:
    q: float
    replicas: list       # [(σ, seed)]
    rounds: list         # the T grid points still needed by some replica
    lr: float | None = None     # a local-work job's clients' learning rate (None: the spec's)

    @property
    def work(self) -> int:
        """replica-rounds: the unit of the progress bar."""
        return len(self.replicas) * max(self.rounds)


def plan(spec: Spec, done: set) -> list[Job]:
    """The jobs still to run: replicas with a missing (σ, T, q, seed),
    grouped by q and by how far they must train, ``spec.chunk`` at most."""
    jobs = []
    for q in spec.q:
        need = {}
        for s in spec.noise_levels():
            for seed in spec.seed_list():
                missing = [t for t in spec.rounds if run_key(s, t, q, seed) not in done]
                if missing:
                    need[(s, seed)] = missing
        # replicas needing the same rounds train together; longest first
        by_rounds = {}
        for rep, missing in need.items():
            by_rounds.setdefault(tuple(missing), []).append(rep)
        for missing, reps in sorted(by_rounds.items(), key=lambda kv: -max(kv[0])):
            for i in range(0, len(reps), spec.chunk):
                jobs.append(Job(q, reps[i:i + spec.chunk], list(missing)))
    return jobs


_SETUP_CACHE: dict = {}


def prepared(spec: Spec):
    """The pre-trial's training subset, partition and model (cached per
    process): :func:`paretofl.fl.build.prepare`."""
    from ..fl.build import prepare
    from ..fl.data import load_dataset
    from ..fl.names import split_name

    key = (spec.dataset, spec.data_dir, spec.public_fraction, spec.data_seed, spec.partition, spec.beta,
           spec.clients, spec.subset, spec.model)
    if key not in _SETUP_CACHE:
        setup = prepare(load_dataset(spec.dataset, spec.data_dir), spec.model, spec.clients,
                        partition=split_name(spec.partition, spec.beta, strict=False), seed=spec.data_seed,
                        public_fraction=spec.public_fraction, subset=spec.subset)
        _SETUP_CACHE.clear()
        _SETUP_CACHE[key] = setup
    return _SETUP_CACHE[key]


#: the share of each client's samples a pre-trial scored on held-out samples (``Spec.scored_on``), and the public
#: tuning, hold out of training and score their runs on; fewer held-out samples than MIN_HELD_OUT are refused
HELD_OUT, MIN_HELD_OUT = 0.2, 10


def scored(spec: Spec):
    """The setup a pre-trial's runs train and are scored on: :func:`prepared`,
    with HELD_OUT of each client's samples held out of training and made the
    test set where the spec scores on held-out samples
    (:func:`paretofl.fl.build.hold_out`, seeded by the data seed: the split
    the public tuning ranks on too), else its test split as it is."""
    return held_out(spec) if spec.scored_on == "held-out" else prepared(spec)


def held_out(spec: Spec):
    """:func:`prepared` with HELD_OUT of each client's samples held out (cached per process)."""
    from ..fl.build import hold_out

    setup = prepared(spec)
    hit = _HELD_CACHE.get("last")
    if hit is None or hit[0] is not setup:        # the setup it was held out of, kept: never another's by its id
        _HELD_CACHE["last"] = (setup, hold_out(setup, HELD_OUT, seed=spec.data_seed))
    return _HELD_CACHE["last"][1]


_HELD_CACHE: dict = {}


def identity(spec: Spec) -> dict:
    """What a results store records of a spec: its base settings; for a
    user's model, the model's fingerprint (class, parameter names and
    shapes); for a user's data, the data's (a digest of its arrays); for
    data that mark their own public samples, the share they are — so that
    one store never mixes two models, or two versions of the data, under one
    name, and says what share it trained on."""
    from ..fl.data import fingerprint, load_dataset
    from .spec import is_reference

    base = spec.base()
    if is_reference(spec.model):
        base["model_fingerprint"] = prepared(spec).model.fingerprint()
    if is_reference(spec.dataset):
        data = load_dataset(spec.dataset, spec.data_dir)
        base["data_fingerprint"] = fingerprint(data)
        if data.public is not None and spec.subset != "all":
            base["public_share"] = round(float(data.public.mean()), 6)   # the mask's, not public_fraction
    return base


def run_job(spec: Spec, job: Job, on_round=None, on_rows=None) -> list[dict]:
    """Train one job and return its rows (one per replica × T of the job);
    ``on_rows(rows)`` receives each T's rows as soon as they are evaluated."""
    import torch

    from ..fl.algorithms import History, train
    from ..fl.build import assemble_pretrial
    from ..mechanisms import get as mechanism_of
    from ..theory.privacy import asymptotic_epsilon

    if spec.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda asked for, but no CUDA device is available")
    pol = assemble_pretrial(scored(spec), job.q, job.replicas, spec.private, MECHANISM, device=spec.device,
                            lower=LOWER_CHUNK, clip=spec.clip, lr=spec.lr, local_epochs=spec.local_epochs,
                            batch_size=spec.batch_size).policy
    wanted = set(job.rounds)
    n = spec.clients
    rows, hist = [], History()
    t0 = time.perf_counter()

    def row(h, seconds):
        s, seed = job.replicas[h["replica"]]
        t = h["round"]
        if s > 0:
            eps = mechanism_of(MECHANISM).charge(job.q, s, n).epsilon(spec.delta, t)
            eps_a = float(asymptotic_epsilon(s, t, job.q, n, spec.delta))
        else:
            eps = eps_a = math.inf
        return dict(sigma=s, rounds=t, q=job.q, seed=seed, test_loss=h["test_loss"], accuracy=h["accuracy"],
                    epsilon=eps, epsilon_asymptotic=eps_a, seconds=seconds)

    def after(t):
        # the rows of T = t + 1, as soon as they are evaluated: a caller that
        # stores them as they come loses at most one stretch of the T grid
        if t + 1 in wanted:
            new = [row(h, (time.perf_counter() - t0) / len(job.replicas)) for h in hist.rows[len(rows):]
                   if h["round"] == t + 1]
            rows.extend(new)
            if on_rows is not None:
                on_rows(new)
        if on_round is not None:
            on_round(t)

    hist.on_round = after
    train(pol, rounds=max(job.rounds), epsilon=None, delta=spec.delta, evaluate=job.rounds, history=hist)
    return rows


def local_work_jobs(spec: Spec, done: set) -> list[Job]:
    """The local-work runs still to train (issue 46): for each learning rate
    η of the spec's (``lr`` and ``local_lrs``) and each local epochs K of
    ``spec.local_work``, the seeds missing a T of the grid, as one
    noise-free job at the grid's largest q (``Job.q``; the replicas carry
    (K, seed) in place of (σ, seed); ``Job.lr`` η).  ``done``: the stored
    (K, η, T, seed)."""
    q = max(spec.q)
    out = []
    for lr in spec.local_work_lrs():
        for k in spec.local_work:
            seeds = [sd for sd in spec.seed_list() if any((k, lr, t, sd) not in done for t in spec.rounds)]
            if seeds:
                out.append(Job(q, [(k, sd) for sd in seeds], list(spec.rounds), lr=lr))
    return out


def run_local_work_job(spec: Spec, job: Job, on_round=None) -> list[dict]:
    """Train one local-work job: its seeds at ``K`` local epochs and its η
    (the spec's where the job names none), without noise (clipped at the
    spec's C), evaluated at every T of the grid."""
    from ..fl.algorithms import History, train
    from ..fl.build import assemble_pretrial

    epochs = int(job.replicas[0][0])
    lr = float(spec.lr if job.lr is None else job.lr)
    seeds = [(0.0, sd) for _, sd in job.replicas]
    pol = assemble_pretrial(scored(spec), job.q, seeds, False, MECHANISM, device=spec.device, lower=LOWER_CHUNK,
                            clip=spec.clip, lr=lr, local_epochs=epochs, batch_size=spec.batch_size).policy
    hist = History(on_round=on_round)
    train(pol, rounds=max(job.rounds), epsilon=None, delta=spec.delta, evaluate=job.rounds, history=hist)
    wanted = set(job.rounds)
    return [dict(epochs=epochs, lr=lr, rounds=h["round"], seed=job.replicas[h["replica"]][1], q=job.q,
                 test_loss=h["test_loss"], accuracy=h["accuracy"]) for h in hist.rows if h["round"] in wanted]


def _record_dissimilarity(spec: Spec, store: Store) -> None:
    """The partition's dissimilarity on the pre-trial's clients, once per
    store (printed beside κ; docs/theory.md §4.E)."""
    if "dissimilarity" in store.meta:
        return
    import json

    from .dissimilarity import dissimilarity

    d = dissimilarity(prepared(spec))
    d["partition"] = spec.partition_name
    store.set_meta("dissimilarity", json.dumps(d))


def _ray_job(spec_dict, q, replicas, rounds, folder=None):
    """A job on a Ray worker.  ``folder``: the driver's working folder, put
    first on the worker's path, so a "package.module:function" model or data
    set resolves there as it did for the driver (a remote cluster needs the
    user's package installed on its workers)."""
    import sys

    if folder and folder not in sys.path and os.path.isdir(folder):
        sys.path.insert(0, folder)
    return run_job(Spec.from_dict(spec_dict), Job(q, [tuple(r) for r in replicas], rounds))


#: what to lower when a pre-trial's job does not fit
LOWER_CHUNK = "lower chunk (the replicas a job trains together) or use a smaller model"


def check_runnable(spec: Spec):
    """Fail before anything is written: the device exists, the data load
    and split, the model builds, and the largest job fits in memory (a
    failed sweep must not leave a store behind)."""
    if spec.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError("device cuda asked for, but no CUDA device is available")
    from ..fl.build import check_fits

    largest = min(spec.chunk, (len(spec.sigmas) + 1) * spec.seeds)
    setup = scored(spec)           # a split that leaves nothing to score on is refused before the store is made
    n = len(setup.data.y_test)
    if spec.scored_on == "held-out" and n < MIN_HELD_OUT:
        raise ValueError(f"the pre-trial would score its runs on {n} held-out sample(s) (about {HELD_OUT:.0%} of each "
                         f"client's, at least one, never its last): too few to tell runs apart; give it more samples "
                         f"(a larger public_fraction, fewer clients) or score on the data set's test split "
                         f"(scored_on test)")
    check_fits(setup, "dpfedavg", largest, spec.device, LOWER_CHUNK, mechanism=MECHANISM,
               sigma=1.0, clip=spec.clip, lr=spec.lr, client_rate=max(spec.q), local_epochs=spec.local_epochs,
               batch_size=spec.batch_size)


def run_sweep(spec: Spec, results, executor: str = "local", ray_address: str | None = None,
              progress: bool = True, max_jobs: int | None = None) -> dict:
    """Run what the store ``results`` lacks of ``spec``; return a summary.

    Several processes may run the same spec on one store: each claims the
    replicas of a job before training it and skips what another live
    process has claimed.  ``max_jobs`` stops after that many jobs (tests of
    resumption use it)."""
    if executor not in ("local", "ray"):
        raise ValueError(f"executor must be 'local' or 'ray', got {executor!r}")
    if not isinstance(spec, Spec):
        raise ValueError(f"a pre-trial needs a Spec (paretofl.api.spec or a TOML file), got {type(spec).__name__}")
    spec.validate("the spec")        # a Spec built field by field is checked like a file, before anything trains
    check_runnable(spec)
    if executor == "ray":   # before the store exists: an unreachable cluster leaves nothing behind
        _check_reachable(ray_address or os.environ.get("RAY_ADDRESS"))
    store = Store(results, identity(spec), classes=prepared(spec).data.n_classes)
    try:
        jobs = plan(spec, store.done())
        if max_jobs is not None:
            jobs = jobs[:max_jobs]
        if spec.private:
            _check_spend(spec, store, jobs)
        lw_jobs = local_work_jobs(spec, store.local_work_done(max(spec.q))) if spec.local_work else []
        lw_before = store.local_work_count()
        if max_jobs is not None:
            lw_jobs = lw_jobs[:max(0, max_jobs - len(jobs))]
        total = sum(j.work for j in jobs) + sum(j.work for j in lw_jobs)
        before = len(store)
        t0 = time.perf_counter()
        # replica-rounds done and the time left, on a terminal (paretofl.progress)
        bar = Progress(total, "pretrial", "replica-round", wanted=progress and total > 0) if total else None
        skipped = trained = 0
        try:
            if executor == "local":
                for job in jobs:
                    mine, held = store.claim(job.q, job.replicas, job.rounds)
                    skipped += held
                    if not mine:
                        if bar is not None:
                            bar.update(job.work)
                        continue
                    job = Job(job.q, mine, job.rounds)
                    width = len(job.replicas)
                    tick = None if bar is None else (lambda t: bar.update(width))
                    try:
                        # each T's rows are stored as they come: an interrupted job keeps them
                        rows = run_job(spec, job, on_round=tick, on_rows=store.add_rows)
                    except BaseException:
                        store.release(job.q, job.replicas)
                        raise
                    store.add_job(rows, job.replicas, job.q)
                    trained += len(rows)
            else:
                trained = _run_ray(spec, jobs, store, bar, ray_address)
            for job in lw_jobs:          # noise-free local work, public stores only: nothing is charged
                width = len(job.replicas)
                rows = run_local_work_job(spec, job, on_round=None if bar is None else (lambda t: bar.update(width)))
                store.add_local_work(rows)
                trained += len(rows)
            if spec.local_work:
                _record_dissimilarity(spec, store)
        finally:
            if bar is not None:
                bar.close()
        return {"results": str(results), "jobs": len(jobs), "runs_added": len(store) - before,
                "runs_total": len(store), "runs_in_spec": len(spec.configurations()),
                "runs_trained": trained, "replicas_left_to_others": skipped, "seconds": time.perf_counter() - t0,
                "local_work_added": store.local_work_count() - lw_before, "local_work_jobs": len(lw_jobs),
                "scored_on": spec.scored_on, "scored_samples": len(scored(spec).data.y_test)}
    finally:
        store.close()


def _check_spend(spec: Spec, store: Store, jobs: list) -> None:
    """A private pre-trial never spends more than its ``epsilon``, counting
    what its store already charged: another grid run into the same store,
    or runs trained afresh on a resume (their noise is new, so they are
    charged again), are refused before anything trains when the total
    would pass it."""
    from ..theory.privacy import account
    from .private import charges_of_log

    planned = [(j.q, sg, sd, max(j.rounds)) for j in jobs for sg, sd in j.replicas]
    if not planned:
        return
    spent_before = store.spend()
    total = account(charges_of_log(spent_before + planned, spec.clients), spec.delta)
    if total > spec.epsilon * (1 + 1e-12):
        before = account(charges_of_log(spent_before, spec.clients), spec.delta) if spent_before else 0.0
        raise ValueError(f"{store.path} has charged epsilon {before:.4g} already; the {len(planned)} run(s) still to "
                         f"train (each trained afresh, with new noise) would bring it to {total:.4g}, above the "
                         f"spec's epsilon = {spec.epsilon:g}: fit what is there (paretofl fit "
                         f"{command_path(store.path)}), or start a new store")


def _check_reachable(address: str, timeout: float = 10.0):
    """A host:port Ray address must accept a connection within ``timeout``
    seconds (ray.init would otherwise wait minutes)."""
    import socket

    if not address or address == "auto" or "://" in address or ":" not in address:
        return
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except (OSError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise ValueError(f"cannot reach a Ray cluster at {address} ({why}); start one (ray start --head) or "
                         "check the address") from None


def _run_ray(spec, jobs, store, bar, address):
    try:
        import ray
    except ImportError:
        raise ValueError("the ray executor needs Ray: pip install 'paretofl[ray]'") from None
    address = address or os.environ.get("RAY_ADDRESS")
    started = False
    if not ray.is_initialized():
        _check_reachable(address)
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False, include_dashboard=False)
        started = True
    try:
        remote = ray.remote(num_cpus=1)(_ray_job)
        pending = {}
        for j in jobs:
            mine, _ = store.claim(j.q, j.replicas, j.rounds)
            if mine:
                job = Job(j.q, mine, j.rounds)
                pending[remote.remote(spec.to_dict(), job.q, job.replicas, job.rounds, os.getcwd())] = job
            elif bar is not None:
                bar.update(j.work)
        trained = 0
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                job = pending.pop(ready[0])
                rows = ray.get(ready[0])
                store.add_job(rows, job.replicas, job.q)
                trained += len(rows)
                if bar is not None:
                    bar.update(job.work)
        finally:
            for job in pending.values():
                store.release(job.q, job.replicas)
        return trained
    finally:
        if started:
            ray.shutdown()
