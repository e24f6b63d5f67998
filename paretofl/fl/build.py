"""The set-up every training shares, written once: data → (public share) →
partition → model.  ``paretofl.train``, the pre-trial's jobs, the
validation and the analysis scripts all start here."""

from __future__ import annotations

from dataclasses import dataclass

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


def prepare(dataset, model, clients: int | None, partition: str = "iid", beta: float = 0.5, seed: int = 0,
            data_dir: str | None = None, public_fraction: float = 1.0, subset: str = "all",
            strategy: str = "auto") -> Setup:
    """Load the data, keep its public share (``subset`` "public") or the
    rest ("rest") or all of it ("all"), split it over ``clients`` clients
    (None with partition "given": the data's own clients), build the model."""
    ds = load_dataset(dataset, data_dir)
    if subset not in ("all", "public", "rest"):
        raise ValueError(f"subset must be all, public or rest, got {subset!r}")
    if subset == "rest" or (subset == "public" and (public_fraction < 1 or ds.public is not None)):
        ds = public_subset(ds, public_fraction, seed=seed, rest=subset == "rest")
    if clients is not None and len(ds.y_train) < clients:
        raise ValueError(f"{len(ds.y_train)} training samples cannot be split over {clients} clients; "
                         "lower clients" + (" or raise public_fraction" if subset == "public" else ""))
    parts = make_partition(partition, ds.y_train.numpy(), clients, seed=seed, beta=beta, clients=ds.clients)
    return Setup(ds, parts, model_from(model, ds, strategy))
