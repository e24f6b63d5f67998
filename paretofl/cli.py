"""`paretofl` command line: a thin front door over the library.

Each sub-command imports what it needs when it runs, so `paretofl design`
and `paretofl account` never load torch.  Errors a user can cause print one
line on stderr and exit with code 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (and exit 2)."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _finite(kind):
    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if isinstance(v, float) and not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"must be finite, got {text!r}")
        return v

    parse.__name__ = kind.__name__
    return parse


FLOAT, INT = _finite(float), _finite(int)


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item"):  # numpy scalar
        return x.item()
    return x


def _emit(obj, as_json, text):
    if as_json:
        print(json.dumps(_jsonable(obj), indent=None))
    else:
        print(text)


# --------------------------------------------------------------------------
# account
# --------------------------------------------------------------------------
def cmd_account(a):
    if a.accountant == "prv":
        from .fl.prv import PRVAccountant  # Opacus, hence torch: only when asked for

        eps = PRVAccountant().step(a.sigma, a.q, a.steps).get_epsilon(a.delta)
    else:
        from .theory.privacy import compute_epsilon

        eps = compute_epsilon(a.q, a.sigma, a.steps, a.delta, conversion=a.conversion)
    out = {"epsilon": eps, "delta": a.delta, "accountant": a.accountant,
           "sigma": a.sigma, "q": a.q, "steps": a.steps}
    _emit(out, a.json, f"epsilon = {eps:.6g}  (delta = {a.delta:g}, accountant = {a.accountant}; "
                       f"noise multiplier {a.sigma:g}, sampling rate {a.q:g}, {a.steps} steps)")


# --------------------------------------------------------------------------
# pareto
# --------------------------------------------------------------------------
def cmd_pareto(a):
    from .theory.pareto import theorem3

    _check_plot_path(a.plot)
    ps = theorem3(a.q, a.clients, a.kappa, a.sigma_min, a.sigma_max, a.max_rounds,
                  integer=a.integer, n_points=a.points)
    out = ps.to_dict()
    if a.plot:
        from . import plots

        plots.pareto_figure(ps, a.q, a.clients, a.kappa, a.sigma_min, a.sigma_max, a.max_rounds,
                            a.delta, a.plot)
        out["plot"] = a.plot
    lines = [f"Theorem 3, case {ps.case}: T_a = {ps.T_a:.4g}, T_b = {ps.T_b:.4g}, "
             f"kappa' = qN/kappa = {ps.kappa_prime:.4g}" + (" (integer T)" if a.integer else "")]
    lines.append(f"{'piece':<11} {'sigma from':>11} {'to':>9} {'T from':>10} {'to':>9}")
    for p in ps.pieces:
        s, t = p.points[:, 0], p.points[:, 1]
        lines.append(f"{p.kind:<11} {s[0]:>11.4g} {s[-1]:>9.4g} {t[0]:>10.4g} {t[-1]:>9.4g}")
    if ps.empty:
        lines.append("empty pieces: " + ", ".join(ps.empty))
    if a.plot:
        lines.append(f"plot written to {a.plot}")
    _emit(out, a.json, "\n".join(lines))


# --------------------------------------------------------------------------
# design
# --------------------------------------------------------------------------
def cmd_design(a):
    from .design import InfeasibleBudget, design

    _check_plot_path(a.plot)
    try:
        d = design(a.clients, a.budget, delta=a.delta, max_rounds=a.max_rounds, time_budget=a.time_budget,
                   round_time=a.round_time, q=a.q, q_min=a.q_min, q_max=a.q_max, sigma_min=a.sigma_min,
                   sigma_max=a.sigma_max, kappa=a.kappa, fit=a.fit, mechanism=a.mechanism)
    except InfeasibleBudget as exc:
        if a.json:
            print(json.dumps({"feasible": False, "budget": exc.epsilon, "min_epsilon": exc.min_epsilon,
                              **exc.where}))
        raise
    out = d.to_dict()
    out["feasible"] = True
    if a.plot:
        from . import plots

        plots.design_figure(d, a.sigma_min, a.sigma_max, a.plot)
        out["plot"] = a.plot
    cf = d.closed_form
    lines = [
        f"Recommendation for N = {d.n_clients} clients, budget epsilon = {d.budget:g}, delta = {d.delta:g}, "
        f"at most {d.max_rounds} rounds ({d.mechanism} view):",
        f"  sample ratio q      {d.q:.4g}  (about {d.q * d.n_clients:.3g} clients a round)",
        f"  rounds T            {d.rounds}",
        f"  noise sigma         {d.sigma:.4g}  per client (noise multiplier charged: {d.noise_multiplier:.4g})",
        f"  epsilon spent       {d.epsilon:.4f}  (RDP accountant; budget {d.budget:g})",
        f"  utility bound       {d.utility_bound:.4g}  (1/T + kappa sigma^2/(qN), units of A)",
        f"  kappa               {d.kappa:.4g}  ({d.kappa_source})",
        f"  Theorem 3 case      {d.case}",
    ]
    if cf:
        lines.append(f"  closed-form point   q {cf['q']:.4g}, T {cf['rounds']}, sigma {cf['sigma']:.4g} "
                     f"(utility {cf['utility_bound']:.4g}; exact search is "
                     f"{-100 * d.distance['utility_rel']:.2f} % better)")
    lines.append(f"  sigma by (4.1)      {d.sigma_relation:.4g}  (relation kappa sigma^2 T = qN at this q, T)")
    if a.plot:
        lines.append(f"plot written to {a.plot}")
    _emit(out, a.json, "\n".join(lines))


# --------------------------------------------------------------------------
# train
# --------------------------------------------------------------------------
def cmd_train(a):
    import numpy as np
    import torch

    from .fl.algorithms import ALGORITHMS, train
    from .fl.data import load_dataset, make_partition
    from .fl.engine import Engine
    from .fl.models import build_model

    if a.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda asked for, but no CUDA device is available")
    if a.replicas < 1 or a.clients < 1 or a.rounds < 1:
        raise ValueError("--replicas, --clients and --rounds must be positive")
    if a.history:
        _check_out_path(a.history, (".csv",))
    ds = load_dataset(a.dataset, a.data_dir)
    parts = make_partition(a.partition, ds.y_train.numpy(), a.clients, seed=a.seed, beta=a.beta)
    net = build_model(a.model, ds.shape, ds.n_classes)
    eng = Engine(net, ds, parts, a.replicas, device=a.device, seeds=[a.seed + r for r in range(a.replicas)])
    common = dict(sigma=a.sigma, clip=a.clip, lr=a.lr)
    if a.algorithm == "dpfedavg":
        pol = ALGORITHMS["dpfedavg"](eng, mechanism=a.mechanism, batch_rate=a.batch_rate, local_steps=a.local_steps,
                                     client_rate=a.client_rate, local_epochs=a.local_epochs,
                                     batch_size=a.batch_size, view=a.view, **common)
    elif a.algorithm == "ali-dpfl":
        pol = ALGORITHMS["ali-dpfl"](eng, epsilon=a.epsilon, delta=a.delta, batch_rate=a.batch_rate,
                                     rounds_server=a.rounds_server or a.rounds, gamma=a.gamma,
                                     client_rate=a.client_rate, **common)
    elif a.algorithm == "adap-dpfl":
        pol = ALGORITHMS["adap-dpfl"](eng, alpha=a.alpha, beta=a.noise_decay, batch_rate=a.batch_rate,
                                      local_steps=a.local_steps, client_rate=a.client_rate, **common)
    else:
        pol = ALGORITHMS["nbafl"](eng, epsilon=a.epsilon, rounds=a.rounds, delta=a.delta, clip=a.clip,
                                  exposures=a.exposures, clients_per_round=a.clients_per_round,
                                  prox_mu=a.prox_mu, lr=a.lr, local_steps=a.local_steps, batch_size=a.batch_size)
    torch.manual_seed(a.seed)
    _, hist, fin = train(pol, rounds=a.rounds, epsilon=a.epsilon, delta=a.delta, eval_every=a.eval_every,
                         progress=not a.json and sys.stderr.isatty())
    if a.history:
        hist.to_csv(a.history)
    mean = lambda v: float(np.mean(v))  # noqa: E731
    out = {"accuracy": mean(fin["accuracy"]), "test_loss": mean(fin["test_loss"]),
           "epsilon": float(np.max(fin["epsilon"])), "delta": a.delta, "rounds": int(np.max(fin["rounds"])),
           "per_replica": {k: np.asarray(fin[k]).tolist() for k in ("accuracy", "test_loss", "epsilon", "rounds")},
           "seconds": fin["seconds"], "algorithm": a.algorithm, "dataset": a.dataset, "model": a.model}
    if a.history:
        out["history"] = a.history
    text = (f"{a.algorithm} on {a.dataset} ({a.model}, {a.clients} clients, {a.partition}), "
            f"{a.replicas} replica(s), {fin['seconds']:.1f} s:\n"
            f"  test accuracy {out['accuracy']:.4f}   test loss {out['test_loss']:.4f}\n"
            f"  privacy spent epsilon = {out['epsilon']:.4g}, delta = {a.delta:g} after {out['rounds']} rounds"
            + (f"\n  history written to {a.history}" if a.history else ""))
    _emit(out, a.json, text)


def _check_out_path(path, suffixes):
    """An output file must have one of ``suffixes`` and an existing folder."""
    from pathlib import Path

    p = Path(path)
    if p.suffix.lower() not in suffixes:
        raise ValueError(f"{path!r} must end in {' or '.join(suffixes)}")
    if not p.parent.exists():
        raise ValueError(f"cannot write {path}: folder {p.parent} does not exist")


def _check_plot_path(path):
    """Fail before the work, not after it, when a plot cannot be written."""
    if path:
        _check_out_path(path, (".png", ".pdf", ".svg"))


# --------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="paretofl", description="Utility-privacy Pareto design for DP federated learning.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("account", help="epsilon of a subsampled Gaussian mechanism")
    s.add_argument("--sigma", type=FLOAT, required=True, help="noise multiplier of the mechanism")
    s.add_argument("--q", type=FLOAT, required=True, help="sampling rate in (0, 1]")
    s.add_argument("--steps", type=INT, required=True, help="number of compositions")
    s.add_argument("--delta", type=FLOAT, default=1e-5)
    s.add_argument("--accountant", choices=("rdp", "prv"), default="rdp",
                   help="rdp (default, no torch) or Opacus's PRV accountant")
    s.add_argument("--conversion", choices=("improved", "classic"), default="improved",
                   help="RDP to (eps, delta) conversion (rdp only)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_account)

    s = sub.add_parser("pareto", help="the closed-form Pareto set (Theorem 3) for fixed q")
    s.add_argument("--clients", type=INT, required=True)
    s.add_argument("--q", type=FLOAT, required=True)
    s.add_argument("--kappa", type=FLOAT, required=True)
    s.add_argument("--sigma-min", type=FLOAT, required=True)
    s.add_argument("--sigma-max", type=FLOAT, required=True)
    s.add_argument("--max-rounds", type=FLOAT, required=True)
    s.add_argument("--integer", action="store_true", help="integer rounds: sigma-intervals per T")
    s.add_argument("--points", type=INT, default=50, help="samples per continuous piece")
    s.add_argument("--delta", type=FLOAT, default=1e-5, help="delta for the plot's epsilon axis")
    s.add_argument("--plot", help="write the sigma-T plane and the objective-space front (.png/.pdf)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_pareto)

    s = sub.add_parser("design", help="recommend q, T and sigma for a privacy budget")
    s.add_argument("--clients", type=INT, required=True, help="number of clients N")
    s.add_argument("--budget", type=FLOAT, required=True, help="privacy budget epsilon")
    s.add_argument("--delta", type=FLOAT, default=1e-5)
    s.add_argument("--max-rounds", type=INT, help="efficiency budget: most rounds")
    s.add_argument("--time-budget", type=FLOAT, help="efficiency budget: total time (with --round-time)")
    s.add_argument("--round-time", type=FLOAT, help="time of one round")
    s.add_argument("--q", type=FLOAT, help="fix the sample ratio (default: search q)")
    s.add_argument("--q-min", type=FLOAT, help="smallest q searched (default 1/N)")
    s.add_argument("--q-max", type=FLOAT, default=1.0, help="largest q searched")
    s.add_argument("--sigma-min", type=FLOAT, default=0.3)
    s.add_argument("--sigma-max", type=FLOAT, default=30.0)
    s.add_argument("--kappa", type=FLOAT, help="the constant of kappa sigma^2 T = qN")
    s.add_argument("--fit", help="fit file from `paretofl fit` (gives kappa)")
    s.add_argument("--mechanism", choices=("aggregate", "local"), default="aggregate")
    s.add_argument("--plot", help="write the design figure (.png/.pdf)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_design)

    s = sub.add_parser("train", help="run DP federated learning (vectorised over clients and replicas)")
    s.add_argument("--algorithm", choices=("dpfedavg", "ali-dpfl", "adap-dpfl", "nbafl"), default="dpfedavg")
    s.add_argument("--dataset", choices=("fashion-mnist", "mnist", "cifar10", "digits"), default="fashion-mnist")
    s.add_argument("--data-dir", help="folder with the IDX files, or a torchvision root")
    s.add_argument("--model", choices=("lr", "lenet", "cnn", "cifar-cnn"), default="cnn")
    s.add_argument("--clients", type=INT, default=10)
    s.add_argument("--partition", choices=("iid", "dirichlet", "shards"), default="iid")
    s.add_argument("--beta", type=FLOAT, default=0.05, help="Dirichlet concentration (dirichlet partition)")
    s.add_argument("--epsilon", type=FLOAT, default=2.0, help="privacy budget; a run stops when it is spent")
    s.add_argument("--delta", type=FLOAT, default=1e-5)
    s.add_argument("--rounds", type=INT, default=100, help="most communication rounds")
    s.add_argument("--sigma", type=FLOAT, default=1.0, help="noise multiplier")
    s.add_argument("--clip", type=FLOAT, default=1.0, help="clipping bound C")
    s.add_argument("--lr", type=FLOAT, default=0.5)
    s.add_argument("--batch-rate", type=FLOAT, default=0.015, help="DP-SGD Poisson batch rate q_b")
    s.add_argument("--local-steps", type=INT, default=1, help="local iterations tau per round")
    s.add_argument("--client-rate", type=FLOAT, default=1.0, help="client sampling ratio q")
    s.add_argument("--mechanism", choices=("sample", "client"), default="sample",
                   help="dpfedavg: DP-SGD in clients (sample) or client-level update clipping (client)")
    s.add_argument("--view", choices=("aggregate", "local"), default="aggregate", help="client-level accounting")
    s.add_argument("--local-epochs", type=INT, default=1, help="client-level dpfedavg / nbafl")
    s.add_argument("--batch-size", type=INT, default=64, help="non-private local SGD batch size")
    s.add_argument("--rounds-server", type=INT, help="ali-dpfl: R_s (default --rounds)")
    s.add_argument("--gamma", type=FLOAT, default=10.0, help="ali-dpfl: heterogeneity Gamma")
    s.add_argument("--alpha", type=FLOAT, default=1.0, help="adap-dpfl: clipping multiplier")
    s.add_argument("--noise-decay", type=FLOAT, default=0.9, help="adap-dpfl: sigma decay beta")
    s.add_argument("--exposures", type=INT, help="nbafl: L (default: rounds)")
    s.add_argument("--clients-per-round", type=INT, help="nbafl: K scheduled clients (default N)")
    s.add_argument("--prox-mu", type=FLOAT, default=0.01, help="nbafl: proximal term")
    s.add_argument("--replicas", type=INT, default=1, help="independent seeds run side by side")
    s.add_argument("--seed", type=INT, default=0)
    s.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    s.add_argument("--eval-every", type=INT, default=1)
    s.add_argument("--history", help="write the per-round history here (.csv)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_train)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except (ValueError, OSError, ArithmeticError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        if isinstance(exc, ArithmeticError):
            msg = f"a number is out of range ({msg})"
        print(f"paretofl {args.command}: error: {msg}", file=sys.stderr)
        return EXIT_USAGE
    return 0


if __name__ == "__main__":
    sys.exit(main())
