"""The Python API: what the ``paretofl`` commands call.

Everything a command does is a function here or in the modules it names;
torch is imported only by :func:`train` (and the audit), when called.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from .recommendation import Design, InfeasibleBudget, design  # noqa: F401  (re-exported)
from .theory.pareto import ParetoSet, theorem3
from .theory.privacy import SAMPLINGS, RDPAccountant, check_delta, check_step

__all__ = ["nbafl_design", "design", "Design", "InfeasibleBudget", "account", "Accounting", "pareto_set", "ParetoSet",
           "fit", "train", "TrainResult", "PRV_LIMITS"]

#: where Opacus's PRV accountant is run at all: beyond these its grid grows
#: past gigabytes and minutes (measured: 26 GiB at small σ and many steps)
PRV_LIMITS = {"steps": 20_000, "rdp_epsilon": 50.0}


@dataclass
class Accounting:
    """ε of a sequence of Gaussian steps; ``by_accountant`` when two ran."""

    epsilon: float
    delta: float
    accountant: str
    noise_multiplier: float
    sample_rate: float
    steps: int
    sampling: str
    order: float = math.nan
    by_accountant: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def account(noise_multiplier: float, sample_rate: float, steps: int, delta: float = 1e-5,
            sampling: str = "poisson", accountant: str = "rdp", conversion: str = "improved") -> Accounting:
    """ε after ``steps`` Gaussian steps (docs/theory.md §5).

    Parameters
    ----------
    noise_multiplier : noise std / sensitivity of each step's release.
    sample_rate : the sampling rate q.
    sampling : "poisson" (membership hidden, add/remove neighbours),
        "attributed" (participation seen: the local view) or "fixed-size"
        (m of n without replacement, replace-one neighbours).
    accountant : "rdp" (paretofl's, no torch), "prv" (Opacus's PRV
        accountant, Poisson sampling only, needs ``paretofl[train]``) or
        "both" (the larger ε is reported).
    """
    check_step(noise_multiplier, sample_rate, steps)
    check_delta(delta)
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")
    if accountant not in ("rdp", "prv", "both"):
        raise ValueError(f"accountant must be rdp, prv or both, got {accountant!r}")
    rdp = RDPAccountant(conversion=conversion).step(noise_multiplier, sample_rate, steps, sampling)
    eps_rdp, order = rdp.epsilon_and_order(delta)
    values, notes = {}, []
    if accountant in ("rdp", "both"):
        values["rdp"] = eps_rdp
    if accountant in ("prv", "both"):
        why = None
        if sampling != "poisson":
            why = f"Opacus's PRV accountant covers Poisson sampling only, not {sampling!r}"
        elif steps > PRV_LIMITS["steps"]:
            why = f"the PRV accountant is run for at most {PRV_LIMITS['steps']:,} steps (its grid grows with them)"
        elif eps_rdp > PRV_LIMITS["rdp_epsilon"]:
            why = (f"the PRV accountant is run where epsilon is at most {PRV_LIMITS['rdp_epsilon']:g} "
                   f"(RDP gives {eps_rdp:.4g} here; its grid would take gigabytes)")
        if why is None:
            from .fl.prv import PRVAccountant  # Opacus, hence torch: only when asked for

            values["prv"] = PRVAccountant().step(noise_multiplier, sample_rate, steps).get_epsilon(delta)
        elif accountant == "prv":
            raise ValueError(why + "; use accountant rdp")
        else:
            notes.append(f"prv not run: {why}")
    eps = max(values.values())  # two accountants: the larger epsilon is the one reported
    return Accounting(eps, delta, accountant, float(noise_multiplier), float(sample_rate), int(steps), sampling,
                      order if "rdp" in values else math.nan, values if len(values) > 1 else {}, notes)


def pareto_set(n_clients: int, q: float, kappa: float, sigma_min: float, sigma_max: float, max_rounds: float,
               integer: bool = False, points: int = 50) -> ParetoSet:
    """The closed-form Pareto set in the (σ, T) plane for a fixed q
    (Theorem 3 of Gu et al., docs/theory.md §3): its case, T_a, T_b and
    labelled pieces.  ``integer``: T takes integer values, each with the
    interval of σ that is Pareto optimal there."""
    return theorem3(q, n_clients, kappa, sigma_min, sigma_max, max_rounds, integer=integer, n_points=points)


def fit(store, epsilon: str = "exact", reference: str = "best", bootstrap: int = 1000, seed: int = 0):
    """The experimental Pareto front and κ of a pre-trial's results store:
    a :class:`paretofl.pretrial.fit.Fit` (``.kappa``, ``.kappa_ci``,
    ``.slope``, ``.front``, ``.problems``, ``.save(path)``)."""
    from .pretrial import fit as fitting

    return fitting.fit(store, epsilon=epsilon, reference=reference, bootstrap=bootstrap, seed=seed)


@dataclass
class TrainResult:
    """A training's outcome: means over replicas, and each replica's."""

    accuracy: float
    test_loss: float
    epsilon: float
    delta: float
    rounds: int
    per_replica: dict
    seconds: float
    algorithm: str
    dataset: str
    model: str
    options: dict
    clients: int = 0
    partition: str = ""
    epsilon_groups: dict | None = None    # clients with budgets of their own: ε spent per group (by budget)
    history: list = field(default_factory=list, repr=False)

    def to_dict(self, with_history: bool = False) -> dict:
        d = asdict(self)
        if not with_history:
            d.pop("history")
        return d


def nbafl_design(n_clients: int, epsilon: float, delta: float, clip: float, client_size: int,
                 max_rounds: int = 10_000, constants: dict | None = None) -> dict:
    """NbAFL's own T* and K* and what its calibrations guarantee:
    :func:`paretofl.theory.convergence.nbafl_design` (imported when called:
    SciPy's optimiser is not needed by ``design``)."""
    from .theory.convergence import nbafl_design as run

    return run(n_clients, epsilon, delta, clip, client_size, max_rounds=max_rounds, constants=constants)


def check_out_path(path, suffixes):
    """An output file must be a path with one of ``suffixes`` in an existing
    folder (the same check for the API and the command line)."""
    import os
    from pathlib import Path

    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise ValueError(f"an output path must be a file name ending in {' or '.join(suffixes)}, got {path!r}")
    p = Path(path)
    if p.suffix.lower() not in suffixes:
        raise ValueError(f"{str(path)!r} must end in {' or '.join(suffixes)}")
    if not p.parent.exists():
        raise ValueError(f"cannot write {path}: folder {p.parent} does not exist")
    if p.is_dir():
        raise ValueError(f"cannot write {path}: it is a folder")


def train(algorithm: str = "dpfedavg", dataset="fashion-mnist", model="lr", clients: int | None = None,
          epsilon: float = 2.0, delta: float = 1e-5, rounds: int = 100, partition: str | None = None,
          beta: float = 0.05, replicas: int = 1, seed: int = 0, device: str = "cpu", data_dir: str | None = None,
          eval_every: int = 1, history: str | None = None, progress: bool = False, design: Design | None = None,
          strategy: str = "auto", budgets=None, **options) -> TrainResult:
    """Train DP federated learning on real data (torch is imported here).

    ``dataset``: a built-in name, a "package.module:function" loader, a
    :class:`paretofl.fl.data.Dataset` (``Dataset.from_arrays``) or a mapping
    of arrays (x_train, y_train, x_test, y_test, optionally clients and
    public).  ``model``: a built-in name, a "package.module:function"
    factory, a factory ``(in_shape, n_classes) -> nn.Module`` or an
    ``nn.Module`` (trained through ``torch.func``; ``strategy`` "loop",
    "vmap" or "auto" batches its clients).  ``partition``: iid (default),
    dirichlet, dirichlet-capped, shards, or given (the data's own clients;
    the default when the data has them, and then ``clients`` defaults to
    their number; 10 otherwise).  Where the data marks its public samples,
    the clients train on the others (the public share is the pre-trial's).

    ``algorithm`` is one of ``paretofl.fl.algorithms.ALGORITHMS``
    (dpfedavg, ali-dpfl, adap-dpfl, nbafl); ``options`` are its config's
    fields (e.g. ``sigma``, ``clip``, ``client_rate``, ``mechanism``; see
    ``ALGORITHMS[name].options()``).  A replica stops when its next round
    would spend more than ``epsilon``.  ``history``: a CSV path that gets a
    row per (round, replica) as they finish.  ``design``: apply a
    :class:`Design` (its q, T, σ, mechanism and budget, and its recipe's C,
    learning rate, local epochs and batch unless ``options`` name them) to client-level
    DP-FedAvg, or a :class:`paretofl.budgets.GroupDesign`.  ``budgets``:
    clients with budgets of their own (a budgets CSV file or a
    :class:`paretofl.budgets.Budgets`): the group design for ``rounds``
    rounds at most is made here (the shipped κ) and trained; each group is
    accounted on its own and stops at its own budget (``epsilon`` unused).
    """
    import numpy as np

    try:
        import torch
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            raise
        raise ModuleNotFoundError("paretofl.train needs PyTorch, which is not installed: "
                                  "pip install 'paretofl[train]'", name="torch") from None

    from .budgets import GroupDesign
    from .fl.algorithms import ALGORITHMS, History
    from .fl.algorithms import train as run
    from .fl.build import prepare
    from .fl.data import PARTITIONS, load_dataset
    from .fl.engine import Engine
    from .fl.options import unused_options

    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    if history is not None:
        check_out_path(history, (".csv",))
    if budgets is not None and design is not None:
        raise ValueError("give budgets or a design, not both (a group design carries its budgets)")
    if (budgets is not None or isinstance(design, GroupDesign)) and algorithm != "dpfedavg":
        raise ValueError("per-client budgets apply to client-level dpfedavg")
    groups = design if isinstance(design, GroupDesign) else None
    if design is not None:
        if algorithm != "dpfedavg":
            raise ValueError("a design applies to client-level dpfedavg")
        if clients is None:
            clients = design.n_clients
        if clients != design.n_clients:
            raise ValueError(f"the design is for {design.n_clients} clients, not {clients}")
        recipe = {k: getattr(design, k, None) for k in ("clip", "lr", "local_epochs", "batch_size")}
        options = {"mechanism": design.mechanism, "client_rate": min(1.0, design.q), "sigma": design.sigma,
                   **{k: v for k, v in recipe.items() if v is not None}, **options}
        epsilon, delta, rounds = design.budget, design.delta, design.rounds
    if budgets is not None:
        options = {"mechanism": "client-aggregate", **options}
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**62:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    for name, v in (("clients", clients), ("rounds", rounds), ("replicas", replicas), ("eval_every", eval_every)):
        if name == "clients" and v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not (epsilon > 0) \
            or not math.isfinite(epsilon):
        raise ValueError(f"epsilon must be a positive finite number, got {epsilon}")
    check_delta(delta)
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu or cuda, got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda asked for, but no CUDA device is available")
    if data_dir is not None:
        from pathlib import Path

        if not Path(data_dir).is_dir():
            raise ValueError(f"data_dir {data_dir} does not exist or is not a folder")
    cls = ALGORITHMS[algorithm]
    known = cls.options()
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ValueError(f"{algorithm} has no option {', '.join(unknown)}; its options: {', '.join(known)}")
    mechanism, unused = unused_options(algorithm, options)
    if unused:
        raise ValueError(f"mechanism {mechanism} does not use {', '.join(unused)}: drop "
                         f"{'it' if len(unused) == 1 else 'them'} or choose the mechanism that does")
    config = cls.Config(**options)
    sigma = getattr(config, "sigma", None)
    if sigma is not None and np.any(np.asarray(sigma, dtype=float) == 0):
        raise ValueError("sigma = 0 adds no noise: epsilon would be infinite; give sigma > 0")
    if partition is not None and partition not in PARTITIONS:
        raise ValueError(f"partition must be one of {', '.join(PARTITIONS)}, got {partition!r}")
    ds = load_dataset(dataset, data_dir)
    if partition is None:
        partition = "given" if ds.clients is not None else "iid"
    if partition == "given" and ds.clients is None:
        raise ValueError("partition given needs a data set with a client id per training sample (clients)")
    if clients is None and partition != "given":
        clients = 10
    # a data set that marks its public share keeps it for pre-trials: the clients hold the rest
    setup = prepare(ds, model, clients, partition=partition, beta=beta, seed=seed, strategy=strategy,
                    subset="all" if ds.public is None else "rest")
    ds, parts, net = setup.data, setup.parts, setup.model
    if budgets is not None:
        from .recommendation import design as make_design

        # design's own defaults, so that train --budgets trains what design --budgets printed
        groups = make_design(len(parts), None, delta, max_rounds=rounds, budgets=budgets, mechanism=config.mechanism)
        config = cls.Config(**{**asdict(config), "sigma": groups.sigma, "client_rate": min(1.0, groups.q)})
        rounds = groups.rounds
    sample_level = algorithm in ("ali-dpfl", "adap-dpfl") or getattr(config, "mechanism", None) == "sample"
    check_delta(delta, len(ds.y_train) if sample_level else len(parts), "sample" if sample_level else "client")
    rate = getattr(config, "client_rate", 1.0)
    if np.any(np.asarray(rate, dtype=float) * len(parts) < 1 - 1e-9):   # the clients that train, not all ids
        raise ValueError(f"client_rate x clients = {float(np.min(np.asarray(rate) * len(parts))):g} < 1: most "
                         "rounds would select no client; raise client_rate or clients")
    eng = Engine(net, ds, parts, replicas, device=device, seeds=[seed + r for r in range(replicas)])
    pol = cls(eng, config, epsilon=epsilon, delta=delta, rounds=rounds, **({"groups": groups} if groups else {}))
    first = pol.charges(0)
    if first is not None and groups is None:
        from .fl.algorithms.base import Ledger

        ledger = Ledger(replicas, delta)
        inc = ledger.increment(first)
        if not ledger.affordable(first, inc, epsilon).any():
            one = ledger.grid_epsilon(inc)
            raise ValueError(f"the budget allows not one round: one round spends epsilon {float(np.min(one)):.4g} "
                             f"> {epsilon:g}; raise epsilon or sigma")
    hist = History(history)
    try:
        _, hist, fin = run(pol, rounds=rounds, epsilon=epsilon, delta=delta, eval_every=eval_every,
                           progress=progress, history=hist)
    finally:
        hist.close()
    mean = lambda v: float(np.mean(v))  # noqa: E731
    return TrainResult(
        accuracy=mean(fin["accuracy"]), test_loss=mean(fin["test_loss"]), epsilon=float(np.max(fin["epsilon"])),
        delta=delta, rounds=int(np.max(fin["rounds"])),
        per_replica={k: np.asarray(fin[k]).tolist() for k in ("accuracy", "test_loss", "epsilon", "rounds")},
        seconds=float(fin["seconds"]), algorithm=algorithm, dataset=_label(dataset), model=net.name,
        options={k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in asdict(config).items()},
        clients=len(parts), partition=partition, history=hist.rows,
        epsilon_groups=None if "epsilon_groups" not in fin else {
            k: float(np.max(v)) for k, v in fin["epsilon_groups"].items()})


def _label(obj) -> str:
    """A data set's name for a result: its name, or what a user passed."""
    if isinstance(obj, str):
        return obj
    return getattr(obj, "name", None) or type(obj).__name__
