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
    from .theory.privacy import compute_epsilon

    values = {}
    if a.accountant in ("rdp", "both"):
        values["rdp"] = compute_epsilon(a.q, a.sigma, a.steps, a.delta, conversion=a.conversion)
    if a.accountant in ("prv", "both"):
        from .fl.prv import PRVAccountant  # Opacus, hence torch: only when asked for

        values["prv"] = PRVAccountant().step(a.sigma, a.q, a.steps).get_epsilon(a.delta)
    eps = max(values.values())  # two accountants: the larger epsilon is the one reported
    out = {"epsilon": eps, "delta": a.delta, "accountant": a.accountant,
           "sigma": a.sigma, "q": a.q, "steps": a.steps}
    if len(values) > 1:
        out["by_accountant"] = values
    extra = ("  [" + ", ".join(f"{k} {v:.6g}" for k, v in values.items()) + "; the larger is reported]"
             if len(values) > 1 else "")
    _emit(out, a.json, f"epsilon = {eps:.6g}  (delta = {a.delta:g}, accountant = {a.accountant}; "
                       f"noise multiplier {a.sigma:g}, sampling rate {a.q:g}, {a.steps} steps){extra}")


# --------------------------------------------------------------------------
# pareto
# --------------------------------------------------------------------------
def cmd_pareto(a):
    from .theory.pareto import theorem3
    from .theory.privacy import _check_delta

    _check_plot_path(a.plot)
    _check_delta(a.delta)
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
    from .theory.privacy import _check_delta

    for flag in ("replicas", "clients", "rounds", "eval_every", "local_steps", "local_epochs", "batch_size"):
        if getattr(a, flag) < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be at least 1, got {getattr(a, flag)}")
    if not a.epsilon > 0:
        raise ValueError(f"--epsilon must be positive, got {a.epsilon}")
    _check_delta(a.delta)
    if a.optimizer != "sgd" and a.algorithm == "nbafl":
        raise ValueError("--optimizer adam is not offered for nbafl (paper 004's clients run SGD)")
    if a.batch_divisor is not None and a.algorithm == "nbafl":
        raise ValueError("--batch-divisor is for DP-SGD clients; nbafl's clients run plain SGD")
    if a.history is not None:
        _check_out_path(a.history, (".csv",))
    ds = load_dataset(a.dataset, a.data_dir)
    parts = make_partition(a.partition, ds.y_train.numpy(), a.clients, seed=a.seed, beta=a.beta)
    net = build_model(a.model, ds.shape, ds.n_classes)
    eng = Engine(net, ds, parts, a.replicas, device=a.device, seeds=[a.seed + r for r in range(a.replicas)])
    common = dict(sigma=a.sigma, clip=a.clip, lr=a.lr, optimizer=a.optimizer, batch_divisor=a.batch_divisor)
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
                                  prox_mu=a.prox_mu, lr=a.lr, local_steps=a.local_steps, batch_size=a.batch_size,
                                  calibration=a.nbafl_calibration)
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
    note = ""
    if a.algorithm == "nbafl":
        out["epsilon_paper"] = pol.epsilon_paper
        note = (f"\n  (paper 004's calibration target was epsilon = {pol.epsilon_paper:g}; the figure above is what "
                f"parameter clipping guarantees — see the README)")
    text = (f"{a.algorithm} on {a.dataset} ({a.model}, {a.clients} clients, {a.partition}), "
            f"{a.replicas} replica(s), {fin['seconds']:.1f} s:\n"
            f"  test accuracy {out['accuracy']:.4f}   test loss {out['test_loss']:.4f}\n"
            f"  privacy spent epsilon = {out['epsilon']:.4g}, delta = {a.delta:g} after {out['rounds']} rounds"
            + note + (f"\n  history written to {a.history}" if a.history else ""))
    _emit(out, a.json, text)


# --------------------------------------------------------------------------
# pretrial / fit / plot / validate
# --------------------------------------------------------------------------
_SPEC_FLAGS = ("dataset", "data_dir", "public_fraction", "partition", "beta", "clients", "model", "q", "sigmas",
               "rounds", "seeds", "clip", "lr", "local_epochs", "batch_size", "delta", "device", "chunk")


def _spec_from_args(a):
    """The spec file (if any), with every flag given overriding its field."""
    from .pretrial.spec import Spec, read_toml

    data = read_toml(a.spec) if a.spec is not None else {}
    for k in _SPEC_FLAGS:
        v = getattr(a, k, None)
        if v is not None:
            data[k] = v
    return Spec.from_dict(data, where=a.spec or "pretrial flags")


def _default_results(a, suffix=".sqlite"):
    from pathlib import Path

    return str(Path(a.spec).with_suffix(suffix)) if a.spec else "pretrial" + suffix


def cmd_pretrial(a):
    from .pretrial.sweep import run_sweep

    spec = _spec_from_args(a)
    out = a.out if a.out is not None else _default_results(a)
    _check_out_path(out, (".sqlite", ".db"))
    summary = run_sweep(spec, out, executor=a.executor, ray_address=a.ray_address,
                        progress=not a.json and sys.stderr.isatty())
    text = (f"pre-trial: {summary['runs_added']} runs added in {summary['jobs']} job(s), "
            f"{summary['seconds']:.1f} s; {summary['runs_total']} runs in {out} "
            f"({summary['runs_in_spec']} in this spec)\n"
            f"next: paretofl fit {out}")
    _emit(summary, a.json, text)


def cmd_fit(a):
    from pathlib import Path

    from .pretrial.fit import fit, write_fit

    out = a.out if a.out is not None else str(Path(a.results).with_name(Path(a.results).stem + "_fit.json"))
    _check_out_path(out, (".json",))  # before the work, not after it
    r = fit(a.results, epsilon=a.epsilon, reference=a.reference, bootstrap=a.bootstrap)
    write_fit(r, out)
    r["fit_file"] = out
    ci = lambda v: f"[{v[0]:.4g}, {v[1]:.4g}]"  # noqa: E731
    text = "\n".join([
        f"fit of {a.results}: {r['n_runs']} runs, {r['n_seeds']} seeds, front of {r['n_front']} configurations "
        f"({r['n_fit']} inside the grid used for kappa)",
        f"  kappa               {r['kappa']:.4g}   95 % bootstrap interval {ci(r['kappa_ci'])}",
        f"  slope log T/log sigma {r['slope']:.3g}  interval {ci(r['slope_ci'])}  (theory: -2)",
        f"  front on relation   {100 * r['within_fraction']:.0f} % of front points within the interval "
        f"(mean |ln T - ln T_relation| = {r['distance']:.3g})",
        f"  epsilon             {r['epsilon_model']};  reference: non-private run, {r['reference']}",
        f"fit written to {out}  (use: paretofl design --fit {out} ...)"])
    _emit(r, a.json, text)


def cmd_plot(a):
    from pathlib import Path

    from . import plots

    fmt = a.format.lower()
    outdir = Path(a.out_dir) if a.out_dir is not None else Path(a.results).parent
    if not outdir.is_dir():
        raise ValueError(f"output folder {outdir} does not exist")
    paths = plots.pretrial_figures(a.results, a.fit, outdir, fmt=fmt, max_rounds=a.max_rounds,
                                   epsilon=a.epsilon)
    _emit({"plots": paths}, a.json, "\n".join(f"plot written to {p}" for p in paths))


def cmd_validate(a):
    from .pretrial.validate import validate

    from pathlib import Path

    spec = _spec_from_args(a)
    outdir = Path(a.out_dir) if a.out_dir is not None else Path(".")
    if not outdir.is_dir():
        raise ValueError(f"output folder {outdir} does not exist")
    r = validate(spec, outdir, full_fraction=a.full_fraction, budget=a.budget, executor=a.executor,
                 ray_address=a.ray_address,
                 progress=not a.json and sys.stderr.isatty())
    text = "\n".join(r["report"])
    _emit({k: v for k, v in r.items() if k != "report"}, a.json, text)


# --------------------------------------------------------------------------
# audit
# --------------------------------------------------------------------------
def cmd_audit(a):
    from .fl.audit import BREAKS, MECHANISMS, audit

    mechanisms = list(MECHANISMS) if "all" in a.mechanism else list(dict.fromkeys(a.mechanism))
    breaks = [b for b in BREAKS if b != "none"] if a.broken == "all" else [a.broken]
    bar = None
    if not a.json and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=len(mechanisms) * len(breaks) * (a.runs // 2 * 2), desc="audit", unit="run", leave=False)
    rows = []
    for m in mechanisms:
        for b in breaks:
            if m == "nbafl-paper" and b != "none" and "all" in a.mechanism:
                continue  # its reported ε is already the guaranteed one: breaking it shows nothing new
            rows.append(audit(m, runs=a.runs, broken=b, seed=a.seed, progress=bar.update if bar else None))
    if bar is not None:
        bar.close()
    lines = [f"{'mechanism':17s} {'broken':9s} {'claimed eps':>11s} {'lower bound':>11s} {'runs':>8s}  verdict"]
    for r in rows:
        verdict = "VIOLATED: leaks more than claimed" if r.violated else "consistent"
        if "epsilon_paper" in r.details:
            verdict += (f" (paper 004's nominal eps {r.details['epsilon_paper']:g} is "
                        f"{'exceeded' if r.epsilon_lower > r.details['epsilon_paper'] else 'not contradicted'})")
        lines.append(f"{r.mechanism:17s} {r.broken:9s} {r.epsilon_claimed:11.4g} {r.epsilon_lower:11.3f} "
                     f"{r.runs:8d}  {verdict}")
    lines.append(f"(one release each; lower bounds hold with 95 % confidence, delta = {rows[0].delta:g})")
    _emit([r.as_dict() for r in rows], a.json, "\n".join(lines))
    # a real mechanism caught leaking more than paretofl reports is a failure
    return 1 if any(r.violated and r.broken == "none" for r in rows) else 0


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
    if path is not None:  # an empty path is a mistake, not "no plot"
        _check_out_path(path, (".png", ".pdf", ".svg"))


# --------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    from .pretrial.spec import DATASETS, MODELS, PARTITIONS   # plain tuples, no torch

    p = _Parser(prog="paretofl", description="Utility-privacy Pareto design for DP federated learning.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    s = sub.add_parser("account", help="epsilon of a subsampled Gaussian mechanism")
    s.add_argument("--sigma", type=FLOAT, required=True, help="noise multiplier of the mechanism")
    s.add_argument("--q", type=FLOAT, required=True, help="sampling rate in (0, 1]")
    s.add_argument("--steps", type=INT, required=True, help="number of compositions")
    s.add_argument("--delta", type=FLOAT, default=1e-5)
    s.add_argument("--accountant", choices=("rdp", "prv", "both"), default="rdp",
                   help="rdp (default, no torch), Opacus's PRV accountant, or both (reports the larger)")
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
    s.add_argument("--dataset", choices=DATASETS, default="fashion-mnist")
    s.add_argument("--data-dir", help="folder with the IDX files, or a torchvision root")
    s.add_argument("--model", choices=MODELS, default="cnn")
    s.add_argument("--clients", type=INT, default=10)
    s.add_argument("--partition", choices=PARTITIONS, default="iid")
    s.add_argument("--beta", type=FLOAT, default=0.05, help="Dirichlet concentration (dirichlet partitions)")
    s.add_argument("--epsilon", type=FLOAT, default=2.0, help="privacy budget; a run stops when it is spent")
    s.add_argument("--delta", type=FLOAT, default=1e-5)
    s.add_argument("--rounds", type=INT, default=100, help="most communication rounds")
    s.add_argument("--sigma", type=FLOAT, default=1.0, help="noise multiplier")
    s.add_argument("--clip", type=FLOAT, default=1.0, help="clipping bound C")
    s.add_argument("--lr", type=FLOAT, default=0.5)
    s.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd",
                   help="clients' optimizer (not nbafl); adam keeps each client's moments across rounds")
    s.add_argument("--batch-rate", type=FLOAT, default=0.015, help="DP-SGD Poisson batch rate q_b")
    s.add_argument("--batch-divisor", type=FLOAT,
                   help="DP-SGD: divide the noised gradient sum by this fixed number (paper 002's code: 64) "
                        "instead of the expected batch q_b*|D_i|")
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
    s.add_argument("--nbafl-calibration", choices=("paper", "clipping"), default="paper",
                   help="nbafl: uplink noise as paper 004 (sensitivity 2C/m) or for the epsilon clipping "
                        "guarantees (sensitivity 2C); the reported epsilon is always the guaranteed one")
    s.add_argument("--replicas", type=INT, default=1, help="independent seeds run side by side")
    s.add_argument("--seed", type=INT, default=0)
    s.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    s.add_argument("--eval-every", type=INT, default=1)
    s.add_argument("--history", help="write the per-round history here (.csv)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_train)

    def spec_flags(s):
        s.add_argument("spec", nargs="?", help="pre-trial spec (TOML); flags below override its fields")
        s.add_argument("--dataset", choices=DATASETS)
        s.add_argument("--data-dir", help="folder with the IDX files, or a torchvision root")
        s.add_argument("--public-fraction", type=FLOAT, help="share of the training set the pre-trial uses")
        s.add_argument("--partition", choices=PARTITIONS)
        s.add_argument("--beta", type=FLOAT, help="Dirichlet concentration")
        s.add_argument("--clients", type=INT)
        s.add_argument("--model", choices=MODELS)
        s.add_argument("--q", type=FLOAT, nargs="+", help="client sample ratio(s)")
        s.add_argument("--sigmas", type=FLOAT, nargs="+", help="noise multipliers of the grid")
        s.add_argument("--rounds", type=INT, nargs="+", help="rounds T of the grid")
        s.add_argument("--seeds", type=INT, help="seeds per configuration")
        s.add_argument("--clip", type=FLOAT)
        s.add_argument("--lr", type=FLOAT)
        s.add_argument("--local-epochs", type=INT)
        s.add_argument("--batch-size", type=INT)
        s.add_argument("--delta", type=FLOAT)
        s.add_argument("--device", choices=("cpu", "cuda"))
        s.add_argument("--chunk", type=INT, help="most replicas trained together in one job")
        s.add_argument("--executor", choices=("local", "ray"), default="local")
        s.add_argument("--ray-address", help="Ray cluster address (default: $RAY_ADDRESS, else a local Ray)")
        s.add_argument("--json", action="store_true")

    s = sub.add_parser("pretrial", help="run a sigma x T grid of DP-FedAvg trainings into a results store")
    spec_flags(s)
    s.add_argument("--out", help="results store (.sqlite; default: the spec's name)")
    s.set_defaults(func=cmd_pretrial)

    s = sub.add_parser("fit", help="experimental Pareto front and kappa from a results store")
    s.add_argument("results", help="results store written by `paretofl pretrial`")
    s.add_argument("--out", help="fit file (.json; default RESULTS_fit.json)")
    s.add_argument("--epsilon", choices=("exact", "asymptotic"), default="exact",
                   help="privacy objective: RDP accountant (default) or model (1.1)")
    s.add_argument("--reference", choices=("best", "final", "same-rounds"), default="best",
                   help="non-private reference: its best T (default), its largest T, or the same T")
    s.add_argument("--bootstrap", type=INT, default=1000, help="bootstrap resamples of the seeds")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_fit)

    s = sub.add_parser("plot", help="figures of a pre-trial: sigma-T plane, objective space, Theorem 3")
    s.add_argument("results", help="results store written by `paretofl pretrial`")
    s.add_argument("--fit", help="fit file (default: fitted now, not saved)")
    s.add_argument("--out-dir", help="folder for the figures (default: beside RESULTS)")
    s.add_argument("--format", choices=("png", "pdf", "svg"), default="png")
    s.add_argument("--max-rounds", type=FLOAT, help="T-tilde of the Theorem 3 panel (default: largest T run)")
    s.add_argument("--epsilon", choices=("exact", "asymptotic"), default="exact")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_plot)

    s = sub.add_parser("validate", help="kappa from the public fraction, checked against a full-data sweep")
    spec_flags(s)
    s.add_argument("--full-fraction", type=FLOAT, default=1.0, help="share of the training set of step 2")
    s.add_argument("--budget", type=FLOAT, help="epsilon of the design checked (default: middle of the full front)")
    s.add_argument("--out-dir", help="folder for both stores and fits (default: here)")
    s.set_defaults(func=cmd_validate)

    s = sub.add_parser("audit", help="empirical lower bounds on epsilon of every mechanism, beside the claimed one")
    s.add_argument("--mechanism", nargs="+", default=["all"],
                   choices=("all", "client-aggregate", "client-local", "sample-dpsgd", "nbafl", "nbafl-paper"),
                   help="mechanisms to audit (default: all)")
    s.add_argument("--break", dest="broken", choices=("none", "noise/10", "no-clip", "all"), default="none",
                   help="audit a deliberately broken copy (noise divided by 10, clipping skipped)")
    s.add_argument("--runs", type=INT, default=100000, help="releases per mechanism, half with the canary")
    s.add_argument("--seed", type=INT, default=0)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_audit)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        rc = args.func(args)
    except (ValueError, OSError, ArithmeticError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        if isinstance(exc, ArithmeticError):
            msg = f"a number is out of range ({msg})"
        print(f"paretofl {args.command}: error: {msg}", file=sys.stderr)
        return EXIT_USAGE
    return rc or 0


if __name__ == "__main__":
    sys.exit(main())
