"""What each algorithm can be told: its options as typed configs (dataclasses
whose fields carry a default and a help line), validated with errors that
name the parameter.  No torch here: the command line builds its flags from
these, and ``paretofl design`` never loads the trainer.  Which mechanisms
DP-FedAvg runs, and which options each uses, the mechanisms say
(:mod:`paretofl.mechanisms`)."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields

import numpy as np

from ..mechanisms import REGISTRY, NbAFLMechanism
from ..mechanisms import names as mechanism_names
from ..theory.bandmf import MAX_BANDS

__all__ = ["option", "check_range", "check_choice", "options_of", "DPFedAvgConfig", "ALIDPFLConfig",
           "AdapDPFLConfig", "NbAFLConfig", "CONFIGS", "DPFEDAVG_MECHANISMS", "CALIBRATIONS", "UNUSED_BY",
           "unused_options"]


def option(default, help: str, *, choices=None, per_replica: bool = False):
    """A field of an algorithm's config: its default and its help line (the
    CLI builds its flags from these).  ``per_replica``: a list of one value
    per replica is accepted too (pre-trials run many σ side by side)."""
    return field(default=default, metadata={"help": help, "choices": choices, "per_replica": per_replica})


def check_range(name, value, lo, hi, lo_open=True, integer=False):
    """Every value of ``value`` (a number or a per-replica list) in the range,
    else a ValueError that names the parameter."""
    kind = np.asarray(value).dtype.kind if not isinstance(value, (str, bytes)) else "U"
    if kind not in "biuf":                 # a number, not text that reads as one (nor a complex, nor a mapping)
        raise ValueError(f"{name} must be {'an integer' if integer else 'a number'}, got {value!r}")
    v = np.asarray(value, dtype=float)
    if isinstance(value, bool) or v.size == 0 or np.any(~np.isfinite(v)) \
            or np.any(v <= lo if lo_open else v < lo) or np.any(v > hi) \
            or (integer and np.any(v != np.round(v))):
        kind = "an integer" if integer else "a number"
        raise ValueError(f"{name} must be {kind} in {'(' if lo_open else '['}{lo:g}, {hi:g}], got {value}")


def per_replica(v, replicas: int, dtype=float) -> np.ndarray:
    """A setting given as one value or one per replica, as an (R,) array;
    any other length refused in one line."""
    a = np.asarray(v, dtype=dtype)
    if a.ndim > 1 or (a.ndim == 1 and len(a) not in (1, replicas)):
        raise ValueError(f"a setting per replica takes one value or one for each of the {replicas} replicas, got "
                         f"{len(a) if a.ndim == 1 else a.shape}: {np.asarray(v).tolist()}")
    return np.broadcast_to(a, (replicas,)).copy()


def check_shapes(config) -> None:
    """Every field of ``config`` of the kind it declares: a number where it
    is declared one (not text that reads as one, nor a complex), and one
    value but where it is marked ``per_replica`` (a list of one value per
    replica is accepted there too)."""
    for f in fields(config):
        v, declared = getattr(config, f.name), str(f.type)
        if v is None:
            continue
        number = ("int" in declared or "float" in declared) and "str" not in declared
        if number and (isinstance(v, (str, bytes)) or np.asarray(v).dtype.kind not in "biuf"):
            raise ValueError(f"{f.name} must be a number, got {v!r}")
        if not f.metadata.get("per_replica", False) and not isinstance(v, str) and np.ndim(v) != 0:
            raise ValueError(f"{f.name} takes one value, got {v!r}")


def check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(str, choices))}, got {value!r}")


def options_of(config_cls) -> dict:
    """name -> (default, help, choices, per_replica) of a config's fields."""
    return {f.name: (None if f.default is MISSING else f.default, f.metadata.get("help", ""),
                     f.metadata.get("choices"), f.metadata.get("per_replica", False))
            for f in fields(config_cls)}


#: the mechanisms client-level DP-FedAvg runs (the registry's trainable ones)
DPFEDAVG_MECHANISMS = mechanism_names(trainable=True)
#: DP-SGD inside the clients (the mechanism whose noise goes on the gradients): the one ALI-DPFL and Adap-DPFL
#: run, and DP-FedAvg's config's default
(DPSGD,) = mechanism_names(noise_on="gradient")
#: algorithm -> the mechanism it runs, for the mechanisms with an algorithm of their own (NbAFL)
OWN_ALGORITHMS = {REGISTRY[n].algorithm: n for n in mechanism_names(trainable=False)}


@dataclass
class DPFedAvgConfig:
    mechanism: str = option(DPSGD, "what is released and charged: "
                            + "; ".join(f"{n}: {REGISTRY[n].summary}" for n in DPFEDAVG_MECHANISMS),
                            choices=DPFEDAVG_MECHANISMS)
    sigma: float = option(1.0, "noise multiplier σ (0: no noise, no privacy)", per_replica=True)
    clip: float = option(1.0, "clipping bound C", per_replica=True)
    lr: float = option(0.5, "clients' learning rate", per_replica=True)
    client_rate: float = option(1.0, "client sampling ratio q", per_replica=True)
    batch_rate: float = option(0.015, "sample: DP-SGD Poisson batch rate q_b", per_replica=True)
    local_steps: int = option(1, "sample: local DP-SGD iterations τ per round", per_replica=True)
    batch_divisor: float | None = option(None, "sample: divide the noised sum by this fixed number instead of "
                                               "q_b times the client's declared size (ALI-DPFL's code: 64)")
    declared_sizes: float | str | None = option(
        None, "sample: every client's size as declared before training, a public number (DP-SGD's divisor q_b "
              "times it, the average's weights); 'data': take the clients' own counts and treat them as public "
              "(the guarantee then assumes them published). Needed: a divisor read from the data leaks its count")
    local_epochs: int = option(1, "client-*: local epochs of plain SGD")
    batch_size: int = option(64, "client-*: batch size of the local SGD")
    optimizer: str = option("sgd", "clients' optimizer; adam keeps each client's moments across rounds",
                            choices=("sgd", "adam"))
    clip_quantile: float | None = option(None, "client-aggregate: adaptive clipping (Andrew et al. 2021) towards "
                                               "this quantile of the update norms, from C = clip (TFF, Flower: 0.5)")
    clip_lr: float = option(0.2, "adaptive clipping: the geometric step η_C of C <- C·exp(-η_C(b - γ))")
    count_noise: float | None = option(None, "adaptive clipping: std σ_b of the noise on the count of unclipped "
                                             "updates (default: max(expected cohort / 20, noise multiplier z))")
    bands: int = option(1, "bandmf, bandmf-amplified: b, the strategy's bands and the number of client groups "
                           "that take turns (client_rate is then the share a round: 1/b for bandmf)")
    bits: int = option(16, "distributed: secure aggregation sums modulo 2^bits")
    scaled_clip: float | None = option(None, "distributed: c = gamma C, the clipping norm on the integer grid "
                                             "(default 2^(bits-1)/64)")
    dim: int | None = option(None, "distributed: the model's number of weights a design assumed (checked)")
    rounding_beta: float = option(0.6065306597126334, "distributed: conditional rounding's bias beta (exp(-1/2))")
    dropout: float = option(0.0, "distributed: the share of a cohort that may drop; each client's noise is set "
                                 "so that the rest carry the charge")

    def __post_init__(self):
        check_shapes(self)
        check_choice("mechanism", self.mechanism, DPFEDAVG_MECHANISMS)
        check_choice("optimizer", self.optimizer, ("sgd", "adam"))
        check_range("sigma", self.sigma, 0, 1e6, lo_open=False)
        check_range("clip", self.clip, 0, 1e12)
        check_range("lr", self.lr, 0, 1e6)
        check_range("client_rate", self.client_rate, 0, 1)
        check_range("batch_rate", self.batch_rate, 0, 1)
        check_range("local_steps", self.local_steps, 1, 1e6, lo_open=False, integer=True)
        check_range("local_epochs", self.local_epochs, 1, 1e6, lo_open=False, integer=True)
        check_range("batch_size", self.batch_size, 1, 1e9, lo_open=False, integer=True)
        if self.clip_quantile is not None:
            if isinstance(self.clip_quantile, bool) or not isinstance(self.clip_quantile, (int, float)) \
                    or not (0 < self.clip_quantile < 1):
                raise ValueError(f"clip_quantile must be a number strictly between 0 and 1, got {self.clip_quantile}")
            if "clip_quantile" not in REGISTRY[self.mechanism].options:
                raise ValueError("adaptive clipping (clip_quantile) applies to the client-aggregate mechanism: "
                                 "its clipped count is released beside the aggregate")
        check_range("clip_lr", self.clip_lr, 0, 1e3)
        check_range("bands", self.bands, 1, MAX_BANDS, lo_open=False, integer=True)
        if self.count_noise is not None:
            check_range("count_noise", self.count_noise, 0, 1e12)
        if self.declared_sizes is not None:
            if self.declared_sizes != "data":
                if isinstance(self.declared_sizes, str):
                    try:
                        self.declared_sizes = float(self.declared_sizes)
                    except ValueError:
                        raise ValueError(f"declared_sizes must be a positive number or 'data', got "
                                         f"{self.declared_sizes!r}") from None
                if isinstance(self.declared_sizes, bool) or not isinstance(self.declared_sizes, (int, float)):
                    raise ValueError(f"declared_sizes must be a positive number or 'data', got "
                                     f"{self.declared_sizes!r}")
                check_range("declared_sizes", self.declared_sizes, 0, 1e12)
            if "declared_sizes" not in REGISTRY[self.mechanism].options:
                raise ValueError("declared_sizes applies to DP-SGD clients (mechanism 'sample'), whose steps are "
                                 "divided by a size; client-level mechanisms divide by the expected cohort")
        if self.batch_divisor is not None:
            check_range("batch_divisor", self.batch_divisor, 0, 1e12)
            if "batch_divisor" not in REGISTRY[self.mechanism].options:
                raise ValueError("batch_divisor applies to DP-SGD clients (mechanism 'sample'); client-level "
                                 "clients run plain SGD on batches of batch_size")


@dataclass
class ALIDPFLConfig(DPFedAvgConfig):
    rounds_server: int | None = option(None, "R_s, the server's round limit (default: the run's rounds)")
    gamma: float = option(10.0, "heterogeneity Γ of Eq. (9)")
    mu_default: float = option(1.0, "μ before two rounds have given an estimate")
    tau_max: int = option(50, "largest τ* a round may use")

    def __post_init__(self):
        if self.mechanism != DPSGD:
            raise ValueError("ali-dpfl runs DP-SGD clients: its mechanism is 'sample'")
        if self.local_steps != 1:
            raise ValueError("ali-dpfl chooses its local steps itself (τ*): do not set local_steps")
        super().__post_init__()
        if self.rounds_server is not None:
            check_range("rounds_server", self.rounds_server, 1, 1e9, lo_open=False, integer=True)
        check_range("gamma", self.gamma, 0, 1e12, lo_open=False)
        check_range("mu_default", self.mu_default, 0, 1e12)
        check_range("tau_max", self.tau_max, 1, 1e6, lo_open=False, integer=True)


@dataclass
class AdapDPFLConfig(DPFedAvgConfig):
    alpha: float = option(1.0, "clipping multiplier α of Eq. (8)")
    noise_decay: float = option(0.9, "noise decay β of Eq. (9), in (0, 1]")
    patience: int = option(3, "validation-loss drops before σ decays")
    sigma_min: float = option(0.0, "floor σ never decays below")

    def __post_init__(self):
        if self.mechanism != DPSGD:
            raise ValueError("adap-dpfl runs DP-SGD clients: its mechanism is 'sample'")
        super().__post_init__()
        check_range("alpha", self.alpha, 0, 1e12)
        check_range("noise_decay", self.noise_decay, 0, 1)
        check_range("patience", self.patience, 1, 1e9, lo_open=False, integer=True)
        check_range("sigma_min", self.sigma_min, 0, 1e6, lo_open=False)


CALIBRATIONS = ("clipping", "paper")


@dataclass
class NbAFLConfig:
    clip: float = option(10.0, "parameter clipping bound C")
    lr: float = option(0.05, "clients' learning rate")
    local_steps: int = option(5, "local SGD steps per round")
    batch_size: int = option(64, "batch size of the local SGD")
    prox_mu: float = option(0.01, "proximal term μ")
    exposures: int | None = option(None, "L, the uploads NbAFL's calibration assumes (default: rounds)")
    clients_per_round: int | None = option(None, "K scheduled clients a round (default: all N)")
    calibration: str = option("clipping", "uplink noise for the epsilon clipping guarantees (clipping), or "
                                          "NbAFL's, whose guarantee is far above the budget (paper)",
                              choices=CALIBRATIONS)
    sigma: float | None = option(None, "the uplink noise multiplier on 2C, sigma_U/(2C) (an NbAFL design's); "
                                       "default: calibrated so that the rounds' uploads meet the budget")

    def __post_init__(self):
        check_shapes(self)
        check_choice("calibration", self.calibration, CALIBRATIONS)
        if self.sigma is not None:
            check_range("sigma", self.sigma, 0, 1e6)
            self.sigma = float(self.sigma)
            if self.calibration == "paper":
                raise ValueError("sigma fixes the uplink noise: it cannot go with calibration paper, which "
                                 "computes NbAFL's own")
        check_range("clip", self.clip, 0, 1e12)
        check_range("lr", self.lr, 0, 1e6)
        check_range("local_steps", self.local_steps, 1, 1e6, lo_open=False, integer=True)
        check_range("batch_size", self.batch_size, 1, 1e9, lo_open=False, integer=True)
        check_range("prox_mu", self.prox_mu, 0, 1e12, lo_open=False)
        if self.exposures is not None:
            check_range("exposures", self.exposures, 1, 1e9, lo_open=False, integer=True)
        if self.clients_per_round is not None:
            check_range("clients_per_round", self.clients_per_round, 1, 1e9, lo_open=False, integer=True)


#: DP-FedAvg's options that only some mechanisms use (the rest every one does)
_SPECIFIC = ("batch_rate", "local_steps", "batch_divisor", "local_epochs", "batch_size", "clip_quantile", "clip_lr",
             "count_noise", "bands", "bits", "scaled_clip", "dim", "rounding_beta", "dropout")
_ADAPTIVE = ("clip_lr", "count_noise")
#: the options each DP-FedAvg mechanism does not use (DP-SGD's batches, or
#: client-level SGD's epochs): given, they are refused, never ignored
UNUSED_BY = {n: tuple(o for o in _SPECIFIC if o not in REGISTRY[n].options) for n in DPFEDAVG_MECHANISMS}


def unused_options(algorithm: str, options) -> tuple[str, list]:
    """(mechanism, the options given that it would ignore), for
    ``algorithm`` run with ``options`` (the names given, with values)."""
    if algorithm in OWN_ALGORITHMS:
        return OWN_ALGORITHMS[algorithm], []
    mechanism = options.get("mechanism") or DPSGD
    unused = [o for o in options if o in UNUSED_BY.get(mechanism, ())]
    if "clip_quantile" in REGISTRY.get(mechanism, REGISTRY[DPSGD]).options and options.get("clip_quantile") is None:
        unused += [o for o in options if o in _ADAPTIVE]   # fixed clipping: no count to noise, no step
    return mechanism, unused


CONFIGS = {"dpfedavg": DPFedAvgConfig, "ali-dpfl": ALIDPFLConfig, "adap-dpfl": AdapDPFLConfig,
           NbAFLMechanism.algorithm: NbAFLConfig}
