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
    k0, lr0 = int(base.get("local_epochs", 1)), round(float(base.get("lr", 0.1)), 12)
    rounds = sorted({int(t) for t in tab["rounds"]})
    seeds = sorted({int(s) for s in tab["seed"]})
    pair = [(int(k), round(float(lr), 12)) for k, lr in zip(tab["epochs"], tab["lr"])]
    # a (K, η) counts where every seed has every T: a half-trained one (an interrupted pre-trial) is left out;
    # ordered by η, then K (as a fit lists them)
    full = sorted({p for p in set(pair) if pair.count(p) == len(rounds) * len(seeds)}, key=lambda p: (p[1], p[0]))
    several = len({lr for _, lr in full}) > 1
    measured = ", ".join(LocalWork.label((k, lr if several else None)) for k, lr in full) or "none"
    if (k0, lr0) not in full or len(full) < 2 or len(rounds) < 2:
        return None, (f"the local work is not complete ({measured} measured at every seed and T, at q {q:g}; it "
                      f"needs two or more, {k0} local epoch(s) at the pre-trial's own eta {lr0:g} among them): "
                      "resume the pre-trial with the same spec, then refit")
    keep = np.array([p in full for p in pair], dtype=bool)
    tab = {k: v[keep] for k, v in tab.items()}
    pair = [p for p, on in zip(pair, keep) if on]
    # L[i, t, s]: each seed's test loss of curve i (NaN where a run is missing)
    L = np.full((len(full), len(rounds), len(seeds)), np.nan)
    for p, t, s, loss in zip(pair, tab["rounds"], tab["seed"], tab["test_loss"]):
        L[full.index(p), rounds.index(int(t)), seeds.index(int(s))] = loss
    epochs = [k for k, _ in full]
    i0 = full.index((k0, lr0))

    def constants(cols):
        with np.errstate(all="ignore"):
            mean = np.nanmean(L[:, :, cols], axis=2)
        out = [curve(rounds, mean[i]) for i in range(len(full))]
        return [a for a, _ in out], [c for _, c in out]

    A, c = constants(np.arange(len(seeds)))
    if A[i0] <= 0:
        return None, (f"the loss did not fall with T at the pre-trial's own {k0} local epoch(s) (its curve is flat or "
                      "rising over the grid's T): the local work cannot be compared; add smaller T to the grid")
    rng = np.random.default_rng(seed)
    draws_A, draws_c = [], []
    for _ in range(bootstrap if len(seeds) >= MIN_SEEDS else 0):
        try:
            a, cc = constants(rng.integers(0, len(seeds), len(seeds)))
        except ValueError:
            continue
        if a[i0] > 0:
            draws_A.append(a)
            draws_c.append(cc)
    dis = json.loads(meta["dissimilarity"]) if "dissimilarity" in meta else {}
    if dis:             # its split named from the store's spec, not from the record (written once, by older code too)
        from .spec import Spec

        dis["partition"] = Spec.from_base(base, where=str(path)).partition_name
    return LocalWork(epochs=epochs, A=A, c=c, reference_epochs=k0, rounds=[rounds[0], rounds[-1]], draws_A=draws_A,
                     draws_c=draws_c, seeds=len(seeds), dissimilarity=dis, q=q,
                     lrs=[lr for _, lr in full] if several else None, reference_lr=lr0 if several else None), None
