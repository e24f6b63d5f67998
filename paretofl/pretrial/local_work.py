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
#: seeds a bootstrap needs (as κ's: from two, a resample is one seed twice or both)
MIN_SEEDS = 3


def fit_local_work(path, bootstrap: int = DRAWS, seed: int = 0) -> tuple[LocalWork | None, str | None]:
    """(the :class:`LocalWork` of a store, None) where it measured enough;
    (None, why not) where it measured some but not enough to compare (an
    interrupted pre-trial: resume it), (None, None) where it measured none.
    One q's runs are one curve: where a store holds local work at several q
    (two specs run into it), the largest q's is fitted."""
    store = Store(path)
    try:
        tab, base, meta = store.local_work_table(), store.base, dict(store.meta)
    finally:
        store.close()
    if len(tab["epochs"]) == 0:
        return None, None
    q = float(tab["q"].max())
    at_q = tab["q"] == q
    tab = {k: v[at_q] for k, v in tab.items()}
    k0 = int(base.get("local_epochs", 1))
    rounds = sorted({int(t) for t in tab["rounds"]})
    seeds = sorted({int(s) for s in tab["seed"]})
    # a K counts where every seed has every T: a half-trained K (an interrupted pre-trial) is left out
    full = {int(k) for k in set(tab["epochs"])
            if np.sum(tab["epochs"] == k) == len(rounds) * len(seeds)}
    epochs = sorted(full)
    if k0 not in epochs or len(epochs) < 2 or len(rounds) < 2:
        return None, (f"the local work is not complete (local epochs {', '.join(map(str, epochs)) or 'none'} measured "
                      f"at every seed and T, at q {q:g}; it needs two or more, {k0} among them): resume the "
                      "pre-trial with the same spec, then refit")
    keep = np.isin(tab["epochs"], epochs)
    tab = {k: v[keep] for k, v in tab.items()}
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
    if A[epochs.index(k0)] <= 0:
        return None, (f"the loss did not fall with T at the pre-trial's own {k0} local epoch(s) (its curve is flat or "
                      "rising over the grid's T): the local work cannot be compared; add smaller T to the grid")
    rng = np.random.default_rng(seed)
    draws_A, draws_c = [], []
    for _ in range(bootstrap if len(seeds) >= MIN_SEEDS else 0):
        try:
            a, cc = constants(rng.integers(0, len(seeds), len(seeds)))
        except ValueError:
            continue
        if a[epochs.index(k0)] > 0:
            draws_A.append(a)
            draws_c.append(cc)
    dis = json.loads(meta["dissimilarity"]) if "dissimilarity" in meta else {}
    if dis:             # its split named from the store's spec, not from the record (written once, by older code too)
        from .spec import Spec

        dis["partition"] = Spec.from_base(base, where=str(path)).partition_name
    return LocalWork(epochs=epochs, A=A, c=c, reference_epochs=k0, rounds=[rounds[0], rounds[-1]], draws_A=draws_A,
                     draws_c=draws_c, seeds=len(seeds), dissimilarity=dis, q=q), None
