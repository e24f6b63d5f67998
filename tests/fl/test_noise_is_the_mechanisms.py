"""The noise the trainer releases is the configured mechanism's ``noise()``
(issue 47: the mechanism that is charged is the one that releases).

Each test runs one round of a tiny setup three times from the same seeds,
with the mechanism's ``noise()`` patched to say 0, 1 and 2 times its std:
the noise's part of the released step must double.  It would not if the
trainer worked σ√m out by itself."""

import dataclasses

import numpy as np
import pytest
from conftest import torch_threads

from paretofl.fl import data as D
from paretofl.fl.algorithms import ALGORITHMS
from paretofl.fl.engine import Engine
from paretofl.fl.models import build_model
from paretofl.mechanisms import REGISTRY, get

_threads = torch_threads(1)

R, N = 3, 10

#: (mechanism, the policy's options): one per kind of release and split
CASES = {
    "aggregate-shares": ("client-aggregate", dict(client_rate=0.5)),
    "aggregate-everyone": ("client-aggregate", dict(client_rate=1.0)),
    "aggregate-adaptive": ("client-aggregate", dict(client_rate=0.6, clip_quantile=0.5)),
    "local": ("client-local", dict(client_rate=0.5)),
    "flower-server": ("flower", dict(client_rate=0.5)),
    "bandmf": ("bandmf", dict(client_rate=0.5, bands=2)),
    "sample": ("sample", dict(batch_rate=0.2, local_steps=1)),
}


@pytest.fixture(scope="module")
def digits():
    return D.load_dataset("digits")


def _step(digits, mechanism, options):
    """One round's released change of the model (R, d); the same seeds every call."""
    parts = D.partition_iid(digits.y_train.numpy(), N)
    eng = Engine(build_model("lr", digits.shape), digits, parts, R, seeds=range(R))
    pol = ALGORITHMS["dpfedavg"](eng, mechanism=mechanism, sigma=np.array([0.7, 1.3, 0.4]), clip=0.5, lr=0.5,
                                 **options)
    g0 = eng.init_global()
    out = pol.round(0, g0, np.ones(R, bool))
    return (eng.flat(out) - eng.flat(g0)).cpu().numpy().astype(np.float64)


@pytest.mark.parametrize("case", list(CASES))
def test_released_noise_follows_the_mechanisms_noise(digits, case, monkeypatch):
    """The round's step at noise() times 0, 1 and 2 (the same seeds: the
    same cohort, batches and draws): the noise's part doubles."""
    mechanism, options = CASES[case]
    cls = REGISTRY[mechanism]
    said = cls.noise
    steps = {}
    for k in (0.0, 1.0, 2.0):
        def scaled(self, *args, k=k, **kw):
            n = said(self, *args, **kw)
            return dataclasses.replace(n, std=k * np.asarray(n.std, dtype=float))

        monkeypatch.setattr(cls, "noise", scaled)
        steps[k] = _step(digits, mechanism, options)
    once, twice = steps[1.0] - steps[0.0], steps[2.0] - steps[0.0]
    assert np.all(np.abs(once).max(axis=1) > 1e-4)                  # there is noise to double
    # float32 rounding is all that is not linear in the noise
    assert np.allclose(twice, 2 * once, rtol=1e-3, atol=1e-4 * np.abs(once).max()), case


@pytest.mark.parametrize("name,options", [("client-aggregate", {}),
                                          ("client-aggregate", dict(clip_quantile=0.5, count_noise=3.0)),
                                          ("client-local", {}), ("flower", {}), ("bandmf", dict(bands=2)),
                                          ("bandmf-amplified", dict(bands=2)), ("distributed", dict(dim=10)),
                                          ("sample", {}), ("nbafl", {})])
def test_noise_of_arrays_is_noise_of_each(name, options):
    """noise() given one q, σ and cohort per replica says, for each, what it
    says given that replica's numbers alone (exactly)."""
    mech = get(name, **options)
    q, sigma, cohort = np.array([0.5, 0.5, 0.5]), np.array([0.0, 0.8, 2.5]), np.array([5.0, 5.0, 5.0])
    many = mech.noise(q, sigma, N, cohort=cohort)
    for r in range(3):
        one = mech.noise(float(q[r]), float(sigma[r]), N, cohort=float(cohort[r]))
        assert float(np.asarray(many.std)[r]) == one.std
        if one.divisor is not None:
            assert float(np.asarray(many.divisor)[r]) == one.divisor
        # and sigma_for inverts it where the noise is linear in σ (not adaptive clipping's raise)
        if not getattr(mech, "adaptive", False) and sigma[r] > 0:
            assert mech.sigma_for(one.std, float(q[r]), N, cohort=float(cohort[r])) == pytest.approx(sigma[r],
                                                                                                     rel=1e-15)
