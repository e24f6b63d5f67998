"""paretofl: how to set q, T and σ in differentially private federated learning.

The Python API (the ``paretofl`` commands are thin shells over it)::

    import paretofl
    d = paretofl.design(n_clients=100, epsilon=2, delta=1e-5, max_rounds=500)
    print(d.q, d.rounds, d.sigma, d.epsilon)

* :func:`design` -- the recommendation for a budget (no torch);
* :func:`account` -- ε of a sequence of Gaussian steps (no torch);
* :func:`pareto_set` -- Theorem 3's closed-form Pareto set (no torch);
* :func:`fit` -- κ and the experimental front of a pre-trial store (no torch);
* :func:`train` -- DP federated learning on real data (imports torch when
  called; ``pip install 'paretofl[train]'``);
* :mod:`budgets` -- clients with budgets of their own (``design(budgets=...)``);
* :func:`nbafl_design` -- NbAFL's own answers (T*, K*) and what they guarantee.

Integrations: :mod:`paretofl.integrations.flower`, :mod:`paretofl.integrations.opacus`.
The mathematics: docs/theory.md.
"""

from . import budgets
from .api import (
           Accounting,
           Design,
           InfeasibleBudget,
           Request,
           Training,
           TrainResult,
           __version__,
           account,
           design,
           fit,
           nbafl_design,
           pareto_set,
           train,
)

__all__ = ["design", "Request", "Design", "InfeasibleBudget", "account", "Accounting", "pareto_set", "fit", "train",
           "Training", "TrainResult", "budgets", "nbafl_design", "__version__"]
