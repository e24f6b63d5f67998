"""The local work a public pre-trial measured (issue 46; docs/theory.md
§4.E): its noise-free runs at several local epochs K, each seed's test loss
at every T of the grid, read from the store and fitted to L(T; K) =
c_K + A(K)/T (:func:`paretofl.theory.local_work.curve`) on the seed mean,
with bootstrap draws over whole seeds.  No torch here."""

from __future__ import annotations

import json

import numpy as np

from ..theory.local_work import LocalWork, curve
from .store import Store

#: bootstrap draws kept in a fit (what the design's interval of the predicted loss is made of)
DRAWS = 200


def fit_local_work(path, bootstrap: int = DRAWS, seed: int = 0) -> LocalWork | None:
    """The :class:`LocalWork` of a store, or None where it measured none."""
    store = Store(path)
    try:
        tab, base, meta = store.local_work_table(), store.base, dict(store.meta)
    finally:
        store.close()
    if len(tab["epochs"]) == 0:
        return None
    epochs = sorted({int(k) for k in tab["epochs"]})
    rounds = sorted({int(t) for t in tab["rounds"]})
    seeds = sorted({int(s) for s in tab["seed"]})
    k0 = int(base.get("local_epochs", 1))
    if k0 not in epochs or len(epochs) < 2:
        raise ValueError(f"{path}: its local work measured local epochs {epochs}; it needs two or more, among them "
                         f"the {k0} kappa is measured at: add them to local_work and run the pre-trial again")
    # L[k, t, s]: each seed's test loss (NaN where a run is missing)
    L = np.full((len(epochs), len(rounds), len(seeds)), np.nan)
    for k, t, s, loss in zip(tab["epochs"], tab["rounds"], tab["seed"], tab["test_loss"]):
        L[epochs.index(int(k)), rounds.index(int(t)), seeds.index(int(s))] = loss

    def constants(cols):
        with np.errstate(all="ignore"):
            mean = np.nanmean(L[:, :, cols], axis=2)
        out = [curve(rounds, mean[i]) for i in range(len(epochs))]
        return [a for a, _ in out], [c for _, c in out]

    A, c = constants(np.arange(len(seeds)))
    rng = np.random.default_rng(seed)
    draws_A, draws_c = [], []
    for _ in range(bootstrap if len(seeds) >= 2 else 0):
        try:
            a, cc = constants(rng.integers(0, len(seeds), len(seeds)))
        except ValueError:
            continue
        if a[epochs.index(k0)] > 0:
            draws_A.append(a)
            draws_c.append(cc)
    dis = json.loads(meta["dissimilarity"]) if "dissimilarity" in meta else {}
    return LocalWork(epochs=epochs, A=A, c=c, reference_epochs=k0, rounds=[rounds[0], rounds[-1]], draws_A=draws_A,
                     draws_c=draws_c, seeds=len(seeds), dissimilarity=dis)
