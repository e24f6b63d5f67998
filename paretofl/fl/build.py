"""The one assembly of a training: data → (public share) → partition →
model → engine → policy.  ``paretofl.train``, the pre-trial's jobs, the
public tuning, the audit, the analysis scripts and the benchmarks all build
their runs here."""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral

from ..mechanisms import REGISTRY
from ..mechanisms import get as mechanism_of
from .data import Dataset, load_dataset, make_partition, public_subset
from .models import MODELS, Model, build_model
from .modules import ModuleModel, is_reference, resolve


def model_from(model, ds: Dataset, strategy: str = "auto") -> Model:
    """The engine model for ``model``: a built-in name (hand-written
    kernels), a "package.module:function" factory
    (``factory(in_shape, n_classes) -> nn.Module``), a factory itself, or an
    ``nn.Module`` (copied: the user's module is never trained in place)."""
    import copy

    from torch import nn

    shape, classes = ds.shape, ds.n_classes
    sample = ds.x_train[:2]
    if isinstance(model, str) and not is_reference(model):
        if model not in MODELS:
            raise ValueError(f"unknown model {model!r}; use one of {', '.join(MODELS)} or name your model factory "
                             "as package.module:function")
        return build_model(model, shape, classes)
    if isinstance(model, nn.Module):
        return ModuleModel(copy.deepcopy(model), shape, classes, strategy=strategy, sample=sample)
    name = model if isinstance(model, str) else getattr(model, "__name__", type(model).__name__)
    factory = resolve(model, "model factory") if isinstance(model, str) else model
    if not callable(factory):
        raise ValueError(f"the model must be a built-in name, package.module:function, a factory or an "
                         f"nn.Module, got {type(model).__name__}")
    import torch

    try:
        with torch.random.fork_rng(devices=[]):   # the template's initialisation leaves the global generator as it was
            module = factory(shape, classes)
    except Exception as exc:
        raise ValueError(f"model factory {name} raised {type(exc).__name__}: {exc}") from None
    if not isinstance(module, nn.Module):
        raise ValueError(f"model factory {name} returned {type(module).__name__}, not a torch.nn.Module")
    return ModuleModel(module, shape, classes, factory=factory, name=name, strategy=strategy, sample=sample)


@dataclass
class Setup:
    data: Dataset
    parts: list
    model: Model


def prepare(dataset, model, clients: int | None, partition: str = "iid", seed: int = 0,
            public_fraction: float = 1.0, subset: str = "all", strategy: str = "auto") -> Setup:
    """Load the data (``dataset``: a name, a loader or a
    :class:`~paretofl.fl.data.Dataset`; :func:`load_dataset` with a folder
    of your own first), keep its public share (``subset`` "public"), the
    rest ("rest") or all of it ("all": a random ``public_fraction`` of the
    whole training set, any public mask of the data's own ignored), split
    it over ``clients`` clients (None with partition "given": the data's
    own clients; ``partition`` in the vocabulary of
    :func:`paretofl.fl.names.split_partition`: dirichlet:ALPHA, plain
    dirichlet at 0.5), build the model."""
    from dataclasses import replace

    from .names import split_partition

    partition, beta = split_partition(partition, None, strict=False)

    ds = load_dataset(dataset)
    if subset not in ("all", "public", "rest"):
        raise ValueError(f"subset must be all, public or rest, got {subset!r}")
    if subset == "rest" or (subset == "public" and (public_fraction < 1 or ds.public is not None)):
        ds = public_subset(ds, public_fraction, seed=seed, rest=subset == "rest")
    elif subset == "all" and public_fraction < 1:
        ds = public_subset(replace(ds, public=None), public_fraction, seed=seed)
    if clients is not None and len(ds.y_train) < clients:
        raise ValueError(f"{len(ds.y_train)} training samples cannot be split over {clients} clients; "
                         "lower clients" + (" or raise public_fraction" if subset == "public" else ""))
    parts = make_partition(partition, ds.y_train.numpy(), clients, seed=seed, beta=beta, clients=ds.clients)
    return Setup(ds, parts, model_from(model, ds, strategy))


def hold_out(setup: Setup, fraction: float, seed: int = 0) -> Setup:
    """``setup`` with a seeded random ``fraction`` of each client's training
    samples (at least one, never a client's last) taken out of training and
    made its test set: the validation split a choice among runs is ranked
    on (the public tuning's, :mod:`paretofl.pretrial.tune`), so that the
    choice never reads the data set's test split, the one results are
    reported on.  The clients keep the rest of their samples, so the split
    and its skew stay the pre-trial's."""
    from dataclasses import replace

    import numpy as np

    if not (0 < fraction < 1):
        raise ValueError(f"the held-out fraction must lie in (0, 1), got {fraction!r}")
    rng = np.random.default_rng([int(seed), 0x5EED])
    parts, held = [], []
    for p in setup.parts:
        p = np.asarray(p)
        k = min(len(p) - 1, max(1, int(round(fraction * len(p))))) if len(p) > 1 else 0
        out = np.zeros(len(p), dtype=bool)
        out[rng.permutation(len(p))[:k]] = True
        parts.append(p[~out])                      # the client's order kept
        held.append(p[out])
    held = np.sort(np.concatenate(held)) if held else np.zeros(0, dtype=np.int64)
    if len(held) == 0:
        raise ValueError("the public pre-trial's clients hold one sample each: there is none to hold out and rank "
                         "runs on; run the pre-trial again on more public samples (a larger public_fraction, more "
                         "samples marked public in your data) or over fewer clients")
    import torch

    idx = torch.from_numpy(held.astype(np.int64))
    ds = replace(setup.data, x_test=setup.data.x_train[idx], y_test=setup.data.y_train[idx])
    return Setup(ds, parts, setup.model)


def check_fits(setup: Setup, algorithm: str, replicas: int, device: str = "cpu", lower: str | None = None,
               groups=None, **options):
    """Check ``algorithm``'s options and refuse, from the options alone, a
    run of ``replicas`` replicas whose rounds cannot fit in the memory free
    — before anything that grows with the replicas (the engine's random
    generators, its cohorts, a store's claims) is made.  Returns the policy
    class and its config."""
    from .algorithms import ALGORITHMS
    from .algorithms.base import LOWER, memory_bytes, refuse_unless_it_fits

    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    cls = ALGORITHMS[algorithm]
    config = cls.Config(**options)
    if groups is not None and not (algorithm == "dpfedavg" and mechanism_of(config.mechanism).groups):
        raise ValueError(f"per-client budgets run with dpfedavg under "
                         f"{' or '.join(k for k, m in REGISTRY.items() if m.groups)}, not {algorithm}"
                         + (f" under {config.mechanism}" if algorithm == "dpfedavg" else ""))
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ValueError(f"replicas must be an integer >= 1, got {replicas!r}")
    ds, parts, net = setup.data, setup.parts, setup.model
    rows, batch = cls.size_before(config, len(parts), max(len(p) for p in parts), groups)
    refuse_unless_it_fits(memory_bytes(net.n_params, replicas, rows * replicas, batch, int(ds.x_train[0].numel())),
                          device, replicas, rows, net.n_params, lower or LOWER)
    return cls, config


@dataclass
class Run:
    """An assembled training: its data, partition and model, its engine, its policy."""

    setup: Setup
    engine: object
    policy: object


@dataclass(frozen=True)
class Budget:
    """What a run's policy is built for: the budget ``epsilon`` (None:
    none; a run stops at it), ``delta``, the ``rounds`` T (None: the
    run's), clients with budgets of their own (``groups``, a design with
    groups) and the clients' declared sizes (``sizes``, DP-SGD's divisor
    and weights; None: its config's ``declared_sizes``)."""

    epsilon: float | None = None
    delta: float = 1e-5
    rounds: int | None = None
    groups: object = None
    sizes: object = None


def assemble(setup: Setup, algorithm: str = "dpfedavg", replicas=1, device: str = "cpu",
             budget: Budget = Budget(), secure: bool = False, lower: str | None = None, **options) -> Run:
    """Engine and policy over ``setup`` (:func:`prepare`): ``replicas``
    replicas (their number, seeded 0, 1, ...; or their seeds, one each) of
    ``algorithm`` (one of :data:`paretofl.fl.algorithms.ALGORITHMS`) with
    ``options`` (its config's fields), built for ``budget``
    (:class:`Budget`).  ``secure``: a real
    release, every random generator seeded from the operating system's
    entropy (the seeds only label the replicas); otherwise a simulation,
    reproducible by its seeds.

    The options are checked, and the memory a round needs estimated and
    refused if it cannot fit, before anything that grows with the replicas
    is made; ``lower`` says what to lower in the caller's terms (the
    trainer's "the replicas", a pre-trial's "chunk", ...)."""
    import torch

    from .algorithms.base import LOWER
    from .engine import Engine

    seeds = None
    if not isinstance(replicas, (bool, int, str)) and hasattr(replicas, "__iter__"):     # the replicas' seeds
        seeds = list(replicas)
        if any(isinstance(s, bool) or not isinstance(s, Integral) for s in seeds):
            raise ValueError(f"the replicas' seeds must be integers, got {seeds!r}")
        seeds, replicas = [int(s) for s in seeds], len(seeds)
    if not isinstance(budget, Budget):
        raise ValueError(f"budget must be a paretofl.fl.build.Budget, got {type(budget).__name__}")
    groups, sizes = budget.groups, budget.sizes
    cls, config = check_fits(setup, algorithm, replicas, device, lower, groups, **options)
    mech = getattr(config, "mechanism", None)
    if secure and mech is not None and mechanism_of(mech).noise_on == "gradient" and sizes is None \
            and getattr(config, "declared_sizes", None) is None:
        # a real release: DP-SGD's divisor must not be read from the data unannounced (a simulation reads the
        # clients' counts and says so: its ε assumes them public, paretofl.api.train's unit)
        raise ValueError("DP-SGD in clients divides each step's noised sum by q_b times the client's size and "
                         "weighs the clients by it: one sample more would move it, so a real release declares the "
                         "sizes before training: give declared_sizes (a number: every client's), or declared_sizes="
                         "'data' to take the clients' own counts and publish them")
    ds, parts, net = setup.data, setup.parts, setup.model
    lower = lower or LOWER
    seeds = list(range(replicas)) if seeds is None else seeds
    eng = Engine(net, ds, parts, replicas, device=device, seeds=seeds, dtype=torch.float32, secure=secure)
    kw = {"groups": groups} if groups is not None else {}
    if sizes is not None:
        kw["sizes"] = sizes
    pol = cls(eng, config, epsilon=budget.epsilon, delta=budget.delta, rounds=budget.rounds, **kw)
    pol.lower = lower
    return Run(setup, eng, pol)


def assemble_pretrial(setup: Setup, q: float, replicas, private: bool, mechanism: str, device: str = "cpu",
                      lower: str | None = None, **options) -> Run:
    """A pre-trial's job as its sweep trains it (:func:`paretofl.pretrial.sweep.run_job`)
    and the audit of the pipeline releases it (:mod:`paretofl.fl.audit`):
    one replica per (σ, seed) of ``replicas``, client-level DP-FedAvg of
    ``mechanism`` at rate ``q``, σ per replica.  A ``private`` pre-trial is
    a release on the clients' data: every replica's generators come from the
    operating system's entropy, so runs at one seed share no noise (two that
    did, y₁ = A + z₁W and y₂ = A + z₂W, would give back the noiseless A);
    a public one is a simulation, its replicas at one seed sharing their
    draws (σ = 0, the reference, sees the draws every σ sees)."""
    import numpy as np

    replicas = [(float(s), int(seed)) for s, seed in replicas]
    return assemble(setup, "dpfedavg", [seed for _, seed in replicas], device=device,
                    lower=lower, secure=bool(private), mechanism=mechanism,
                    sigma=np.array([s for s, _ in replicas]), client_rate=q, **options)
