"""Algorithms as policies over the one engine (their options: paretofl.fl.options).

A policy decides, each round, what the engine does (how many local steps,
which σ and C, where the noise goes) and what the accountant is charged; the
round loop (:func:`train`) is shared.  ``ALGORITHMS`` maps names to policies.
"""

from .adap_dpfl import AdapDPFL  # noqa: F401
from .ali_dpfl import ALIDPFL  # noqa: F401
from .base import History, Policy, train  # noqa: F401
from .dpfedavg import DPFedAvg  # noqa: F401
from .nbafl import NbAFL  # noqa: F401

ALGORITHMS = {"dpfedavg": DPFedAvg, "ali-dpfl": ALIDPFL, "adap-dpfl": AdapDPFL, NbAFL.name: NbAFL}
