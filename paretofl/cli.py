"""`paretofl` command line: a thin face over the Python API.

It imports :mod:`paretofl.api` and nothing else of paretofl; each command
calls the API function of the same name, which imports what it needs when
it runs, so `paretofl design` and `paretofl account` never load torch.
Library errors name API parameters; one map (:func:`_flagged`, built from
each command's own flags) says them with the flags the user typed.  Errors
a user can cause print one line on stderr and exit with code 2; Ctrl-C
prints one line and exits 130 with nothing lost.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys

from . import api

EXIT_USAGE = 2
#: a training that ran but did not do what was asked (no round, fewer rounds, a diverged loss): issue 45
EXIT_INCOMPLETE = 3
EXIT_INTERRUPTED = 130
#: optional dependencies and the extra that brings each (flwr's: Flower's, :func:`_extra`)
_EXTRAS = {"torch": "train", "torchvision": "train", "opacus": "train", "sklearn": "train", "ray": "ray"}


def _extra(module: str) -> str | None:
    """The extra that brings ``module`` (Flower's is named after the framework)."""
    return {**_EXTRAS, "flwr": api.names()["flower_framework"]}.get(module)


class _Help(argparse.HelpFormatter):
    """Help lines that state every default (but not "None")."""

    def _get_help_string(self, action):
        h = action.help or ""
        if action.default not in (None, False, argparse.SUPPRESS) and "%(default)" not in h and \
                action.option_strings:
            h += " (default: %(default)s)"
        return h


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (and exit 2)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _Help)
        # no prefixes: train --budget 2 would otherwise read as --budgets 2 (a file), and a flag added later
        # could change what an abbreviation means
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _number(kind):
    def parse(text):
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"must be finite, got {text!r}")
        if kind is int:
            if not v.is_integer():
                raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}")
            if abs(v) > 2**53:
                raise argparse.ArgumentTypeError(f"is too large: {text!r}")
            return int(v)
        return v

    parse.__name__ = kind.__name__
    return parse


FLOAT, INT = _number(float), _number(int)


def _name_or_reference(known, what):
    """An argparse type: one of the built-in names, or a user's
    "package.module:function" (resolved when the command runs)."""

    def parse(text):
        if text in known or api.is_reference(text):
            return text
        raise argparse.ArgumentTypeError(f"{text!r} is neither one of {', '.join(known)} nor your {what} "
                                         "as package.module:function")

    parse.__name__ = what
    return parse


def _plural(n, word):
    return f"{n:g} {word}" + ("" if n == 1 else "s")


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item"):  # numpy scalar
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        # JSON has no NaN or infinity: NaN (nothing measured) is null, ±inf a string
        return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def _sh(path) -> str:
    """A path as a command a next: line names takes it (:func:`paretofl.shell.command_path`)."""
    return api.command_path(path)


def _emit(obj, as_json, text):
    if as_json:
        print(json.dumps(_jsonable(obj), indent=None))
    else:
        print(text)


# --------------------------------------------------------------------------
# the one map: API parameter names -> the flags of the command in use
# --------------------------------------------------------------------------
#: API parameters said by a flag of another name, or plain words that are a
#: parameter in a command's messages; the rest: every parameter whose name
#: is an identifier (sigma_min, client_rate) maps to the flag of that
#: destination (--sigma-min, --client-rate)
_ALIASES = {
    "*": {"n_clients": "clients"},
    "account": {"noise_multiplier": "sigma", "sample_rate": "q", "steps": "steps", "delta": "delta"},
    "design": {"kappa": "kappa", "fit": "fit", "tune": "tune", "clips": "clips", "lrs": "lrs", "by": "tune_by",
               "epochs": "tune_epochs", "clip": "clip", "max_grad_norm": "clip", "clipping_norm": "clip",
               "dataset_size": "client_size"},
    # the Opacus bridge's words for the export's flags
    "export": {"clip": "clip", "max_grad_norm": "clip", "clipping_norm": "clip", "dataset_size": "client_size"},
    "train": {"mechanism": "mechanism", "beta": "beta", "partition": "partition"},
    "pretrial": {"beta": "beta", "partition": "partition"},
}
#: the aliases that are plain words are said as flags in a command's errors,
#: never in its notes (where "kappa" or "fit" is the thing, not the flag)
_IN_ERRORS_ONLY = {"kappa", "fit", "tune", "clips", "lrs", "by", "steps", "delta", "mechanism", "beta", "partition",
                   "clip"}
#: aliases that are flags only where a message writes them as a keyword (epochs='4' or epochs=): plain words else
_AS_KEYWORD_ONLY = {"epochs", "by"}
#: what a message says that is not its words: "quoted" text (a file's own words) and what reads as a path
#: (a token with a slash, or a name with an extension: nothere/fit.json, tune.db)
_VERBATIM = re.compile(r'"[^"]*"|[^\s"]*[/\\][^\s"]*|[^\s"]+\.[A-Za-z][A-Za-z0-9]{0,7}\b')
#: the mechanisms' own knobs of one word (bits, bands): flags in errors, where the message names the option
_SAID_AS_OPTION = frozenset(o for o in api.names()["mechanism_option_flags"] if "_" not in o)


class _Flags(dict):
    """API parameter -> flag, and ``given``: the values the user typed (said back word for word)."""

    given: tuple = ()


def _flag_map(command: str, parser) -> dict:
    """API parameter -> flag for ``command``: the flags of its parser by
    their destination (names with an underscore, which no sentence uses as a
    word), and the aliases above."""
    dest = {a.dest: a.option_strings[-1] for a in parser._actions if a.option_strings and a.dest != "help"}
    out = {name: dest[d] for name, d in {**_ALIASES["*"], **_ALIASES.get(command, {})}.items() if d in dest}
    for d, flag in dest.items():
        if "_" in d or d in _SAID_AS_OPTION:
            out.setdefault(d, flag)
    return out


def _flagged(text: str, mapping: dict, error: bool = False) -> str:
    """A library message in the command line's words (its flags); plain
    words only in an ``error``; what the message quotes ("...": a fit's own
    words, say) and the paths it names are left as they are."""
    import shlex

    # the verbatim parts are held out as placeholders (a sentinel the text does not hold, an index) while the
    # words are said
    mark = next((chr(c) for c in range(0xE000, 0xF900) if chr(c) not in text), None)
    if mark is None:                       # a text holding every private-use character: a longer sentinel
        mark = "\ue000" + next(f"{k:x}" for k in range(len(text) + 1) if f"\ue000{k:x}" not in text)
    kept = []
    # the paths the user typed, word for word (one with a space, folders named lr=0.1,clip=1, a file named clips),
    # also as a library writes them back (./a/b as a/b)
    typed = [v for v in getattr(mapping, "given", ()) if re.search(r"[/\\\s=.]", v) or os.path.exists(v)]
    given = sorted({*typed, *(os.path.normpath(v) for v in typed)} - {"."}, key=len, reverse=True)
    pattern = re.compile("|".join([*map(re.escape, given), _VERBATIM.pattern])) if given else _VERBATIM

    def hold(m):
        tok = m[0]
        if tok in given:
            kept.append(tok)
            return f"{mark}{len(kept) - 1}{mark}"
        if not tok.startswith('"'):
            key = re.match(r"[a-z_]+=", tok)         # from_store=/a/b: the keyword is a word, the path verbatim
            head, tok = (key[0], tok[len(key[0]):]) if key else ("", tok)
            tail = re.search(r"[),;:.]*$", tok)[0]
            tok = tok[:len(tok) - len(tail)] if tail else tok
            if not tok or all(part in mapping for part in re.split(r"[/\\]", tok)):
                return m[0]                          # q_min/q_max: parameters, said as flags
            kept.append(tok)
            return f"{head}{mark}{len(kept) - 1}{mark}{tail}"
        kept.append(tok)
        return f"{mark}{len(kept) - 1}{mark}"

    said = pattern.sub(hold, text)
    # a keyword as the library's advice writes it (by='loss', lrs=): the flag, in notes and errors alike
    said = re.sub(r"(?<![-\w])([a-z_]+)=(?:'([^']*)'|(?=[\s),;]|$))",
                  lambda m: (mapping[m[1]] + (f" {shlex.quote(m[2])}" if m[2] is not None else ""))
                  if m[1] in mapping else m[0], said)
    for param in sorted(mapping, key=len, reverse=True):
        if param in _AS_KEYWORD_ONLY:
            continue
        if param in _SAID_AS_OPTION:
            # a family's one-word knob (bits, bands) is also a plain word: a flag only where the
            # message names the option ("bits must be ...", "give dim ...", "lower the bands or q")
            pat = (rf"(?<![-\w])(?:(?<=give )|(?<=the )|(?<=use )|(?<=uses )|(?<=option )|(?<=^)){param}\b"
                   r"(?=$|[:;,]| must\b| \(| or\b| ≥| >=)")
            if error:
                said = re.sub(pat, mapping[param], said)
        elif error or param not in _IN_ERRORS_ONLY:
            said = re.sub(rf"(?<![-\w]){param}\b(?!-)", mapping[param], said)
    return re.sub(f"{re.escape(mark)}(\\d+){re.escape(mark)}", lambda m: kept[int(m[1])], said)


# --------------------------------------------------------------------------
# account
# --------------------------------------------------------------------------
def cmd_account(a):
    r = api.account(a.sigma, a.q, a.steps, a.delta, sampling=a.sampling, accountant=a.accountant,
                    conversion=a.conversion)
    out = {"epsilon": r.epsilon, "delta": r.delta, "accountant": r.accountant, "sigma": a.sigma, "q": a.q,
           "steps": a.steps, "sampling": r.sampling, "relation": r.relation}
    if r.by_accountant:
        out["by_accountant"] = r.by_accountant
    if r.notes:
        out["notes"] = r.notes
    extra = ("  [" + ", ".join(f"{k} {v:.6g}" for k, v in r.by_accountant.items()) + "; the larger is reported]"
             if r.by_accountant else "")
    text = (f"epsilon = {r.epsilon:.6g}  (delta = {a.delta:g}, accountant = {a.accountant}; noise multiplier "
            f"{a.sigma:g}, sampling rate {a.q:g} ({a.sampling}), {_plural(a.steps, 'step')}){extra}")
    _emit(out, a.json, "\n".join([text, f"relation: {r.relation}"] + [f"note: {n}" for n in r.notes]))


# --------------------------------------------------------------------------
# pareto
# --------------------------------------------------------------------------
def cmd_pareto(a):
    if a.plot is not None:
        api.check_out_path(a.plot, (".png", ".pdf", ".svg"))
    if a.delta is not None:
        api.check_delta(a.delta)
    ps = api.pareto_set(a.clients, a.q, a.kappa, a.sigma_min, a.sigma_max, a.max_rounds, integer=a.integer,
                        points=a.points)
    out = ps.to_dict()
    if a.plot:
        api.pareto_figure(ps, a.delta, a.plot)
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
# design and export
# --------------------------------------------------------------------------
def _export_lines(p, framework):
    """A plan in a framework's own parameter names."""
    if framework == "jax-privacy":
        every = api.mechanism(p.mechanism).who_joins(p.group_rate)
        shown = ", ".join(f"{c:.6g}" for c in p.coefficients[:8]) + (", ..." if p.bands > 8 else "")
        return [f"{p.mechanism} (banded matrix factorization; correlated noise, JAX Privacy's privatizer):",
                f"  bands b             {p.bands}  (coefficients {shown}: all {p.bands} in --json)",
                f"  groups              {p.groups}: client i in group i mod b; round t takes {every} "
                f"(about {p.expected_cohort:.4g} clients)",
                f"  noise               z = {p.noise_multiplier:.6g}, std z C = {p.stddev:.6g} on the sum (C = "
                f"{p.clipping_norm:g}); the sum divided by {p.expected_cohort:.6g}",
                f"  rounds              {p.num_rounds} ({p.participations} per client at most); epsilon "
                f"{p.epsilon:.4f}, delta {p.delta:g} (client-level, add/remove)"]
    if framework == "tff":
        return [f"TensorFlow Federated's DistributedDpSumFactory (distributed DP: Skellam noise, secure aggregation "
                f"modulo 2^{p.bits}):",
                f"  noise_multiplier    {p.noise_multiplier:.6g}  (the design's z, times the inflated sensitivity "
                "over the scaled clip at the scale TFF picks)",
                f"  expected clients    {p.expected_clients_per_round}  (the fewest survivors the noise is set for)",
                f"  bits, l2_clip       {p.bits}, {p.l2_clip:g};  modclip_prob {p.modclip_prob:g}, beta {p.beta:.4g}, "
                f"rotation {p.rotation_type}",
                f"  scale               {p.scale:.6g} (TFF's; the design's {p.design_scale:.6g}); error ratio "
                f"{p.error_ratio:.4g} (the design's {p.design_error_ratio:.4g})",
                f"  rounds              {p.num_rounds}, exactly {p.clients_per_round} of {p.num_clients} clients a "
                f"round, a model of {p.dim} weights; "
                f"epsilon {p.epsilon:.4f}, delta {p.delta:g} (client-level, zero-out)",
                *(f"  - {n}" for n in p.notes)]
    if framework == "opacus":
        return [f"Opacus in each client (sample-level DP of its data over the design's {p.rounds} rounds):",
                f"  DataLoader(client_data, batch_size={p.batch_size})  ->  sample rate {p.sample_rate:.6g}",
                f"  PrivacyEngine().make_private(module, optimizer, loader, noise_multiplier={p.noise_multiplier:.6g}, "
                f"max_grad_norm={p.max_grad_norm:g}, poisson_sampling=True)",
                f"  {p.local_steps} steps a round, {p.steps} in all; epsilon {p.epsilon:.4f} (sample-level, "
                f"add/remove; Opacus's and paretofl's accountants both within it), delta {p.delta:g}: n*delta = "
                f"{p.exposed:.3g}, the client's samples a release within it may expose outright, in expectation",
                *(f"  - {n}" for n in p.notes)]
    recipe = ([f"  each ClientApp trains, each round: {p.local_epochs} local epoch(s)"
               + (f" of batch {p.batch_size}" if p.batch_size else "")
               + (f" at learning rate {p.learning_rate:g}" if p.learning_rate else "")
               + " (the design's recipe: its T and sigma are for it)"] if p.local_epochs else [])
    if p.accounted:
        return recipe + ["Flower with its own accountant (flwr.serverapp; m of N nodes a round, no amplification "
                "charged):",
                f"  FedAvg(fraction_train={p.fraction_fit:.6g}, min_train_nodes={p.num_sampled_clients}, "
                f"min_available_nodes={p.num_clients}, fraction_evaluate=0.0)",
                "  DifferentialPrivacyServerSideFixedClipping(strategy, "
                f"noise_multiplier={p.noise_multiplier:.6g}, "
                f"clipping_norm={p.clipping_norm:g}, num_sampled_clients={p.num_sampled_clients}, "
                "accountant=flower.accountant(plan))  # Flower's RdpAccountant: add/remove, no amplification, "
                f"max_epsilon={p.budget:g}"
                + ("" if p.num_sampled_clients >= p.num_clients else ", each round charged at z/2 (m < N)"),
                f"  strategy.start(grid, initial_arrays, num_rounds={p.num_rounds});  noise std on the mean: "
                f"{p.noise_std_on_mean:.4g}",
                f"  epsilon {p.epsilon:.4f} (client-level, add/remove: what Flower's accountant reports), delta "
                f"{p.delta:g}; every "
                "ClientApp reports num-examples 1 (Flower accounts equal weights only)"]
    return recipe + ["Flower (central DP, server-side fixed clipping; each round m of N clients without replacement):",
            f"  FedAvg(fraction_fit={p.fraction_fit:.6g}, min_fit_clients={p.num_sampled_clients}, "
            f"min_available_clients={p.num_clients}, fraction_evaluate=0.0)",
            f"  DifferentialPrivacyServerSideFixedClipping(strategy, noise_multiplier={p.noise_multiplier:.6g}, "
            f"clipping_norm={p.clipping_norm:g}, num_sampled_clients={p.num_sampled_clients})",
            f"  ServerConfig(num_rounds={p.num_rounds});  noise std on the mean of the updates: "
            f"{p.noise_std_on_mean:.4g}",
            f"  epsilon {p.epsilon:.4f} (client-level; fixed-size sampling, replace-one neighbours), delta {p.delta:g}"]


def _export(a, d, out, lines):
    p, code = api.export(d, a.export, clip=a.clip, client_size=a.client_size, batch_size=a.batch_size,
                         local_steps=a.local_steps)
    out["export"], out["snippet"] = {"framework": a.export, **p.to_dict()}, code
    recipe = []
    if a.export in ("jax-privacy", "tff") and d.local_epochs is not None:   # Flower's, Opacus's plans say it themselves
        out["export"].update(local_epochs=d.local_epochs, learning_rate=d.lr, batch_size=d.batch_size)
        recipe = [f"  each client trains, each round: {d.local_epochs} local epoch(s)"
                  + (f" of batch {d.batch_size}" if d.batch_size else "") + (f" at learning rate {d.lr:g}" if d.lr
                                                                              else "")
                  + " (the design's recipe: its T and sigma are for it)"]
    lines += [""] + _export_lines(p, a.export) + recipe + ["", code, ""]


#: Theorem 3's cases in words: where the round cap T~ (--max-rounds) cuts the Pareto front
#: Theorem 3's cases say where the front meets the round cap; whether the cap binds the design is its own T's say
_CASES = {"I": "the front runs from sigma_max down to sigma_min below the round cap",
          "II": "the front follows the relation up to the round cap, then runs along it",
          "III": "the front reaches the round cap before the relation, then runs along it"}


def _case_text(d) -> str:
    """Theorem 3's case in words, and whether the round cap binds this design (only where its T is the cap)."""
    binds = d.rounds >= d.max_rounds
    return (f"{_CASES[d.case]}; " + (f"the cap binds this design: T = {d.rounds} is the most allowed" if binds else
                                     f"the cap does not bind this design: T = {d.rounds} of {d.max_rounds} allowed"))


def _accountant(d) -> str:
    """Which accountant gave the design's epsilon, in a few words."""
    if "pretrial" in d.details:
        return "RDP accountant: the private pre-trial's runs and the training composed"
    if "bands" in d.details:
        k = d.details["participations"]
        what = ("Gaussian" if d.sampling == "none"
                else f"Poisson-subsampled Gaussian, rate {d.details['group_rate']:.4g}")
        return f"RDP accountant: {k} compositions of the {what}, one per round a client joins"
    return f"RDP accountant, {d.sampling} sampling"


#: design's flags (their dest) -> the Request's fields they give; a flag left out is the Request's default
_REQUEST_FLAGS = {"clients": "n_clients", "budget": "epsilon", "delta": "delta", "max_rounds": "max_rounds",
                  "time_budget": "time_budget", "round_time": "round_time", "q": "q", "q_min": "q_min",
                  "q_max": "q_max", "sigma_min": "sigma_min", "sigma_max": "sigma_max", "kappa": "kappa",
                  "fit": "fit", "mechanism": "mechanism", "framework": "framework", "from_store": "from_store",
                  "utility_model": "utility_model", "budgets": "budgets", "local_epochs": "local_epochs",
                  "partition": "partition"}


def _request(a, **over) -> api.Request:
    """What ``paretofl design`` asks, as the API's Request: the flags given,
    the Request's defaults for the others."""
    given = {field: getattr(a, dest) for dest, field in _REQUEST_FLAGS.items()}
    given.update(mechanism_options=_mechanism_options(a) or None, **over)
    return api.Request(**{k: v for k, v in given.items() if v is not None})


def _mechanism_options(a) -> dict:
    """The mechanism's own options given as flags (adaptive clipping's, the bands)."""
    return {k: getattr(a, k) for k in api.names()["mechanism_options"] if getattr(a, k, None) is not None}


def cmd_design(a):
    known = api.names()
    if a.mechanism in known["own_design"]:
        return _design_nbafl(a)
    export_flags = {"--clip": a.clip, "--client-size": a.client_size, "--batch-size": a.batch_size,
                    "--local-steps": a.local_steps}
    unused = [f for f, v in export_flags.items() if v is not None and a.export is None]
    if unused:
        raise ValueError(f"{', '.join(unused)} {'applies' if len(unused) == 1 else 'apply'} only to --export (and "
                         "--clip, --client-size to "
                         "--mechanism nbafl)")
    flowers = [f for f in known["frameworks"] if f != "paretofl"]
    paretofls = [f for f in flowers if not api.mechanism(f).accounted_outside]     # Flower's, accounted by paretofl
    framework = a.framework or (paretofls[0] if a.export == known["flower_framework"] else "paretofl")
    if a.export == known["flower_framework"] and framework not in flowers and a.mechanism not in flowers:
        raise ValueError("--export flower designs for Flower: leave --framework out or set it to flower "
                         "(or flower-accounted, for Flower's own accountant)")
    for path, ends in ((a.out, (".json",)), (a.plot, (".png", ".pdf", ".svg"))):
        if path is not None:          # before the search and the tuning's minutes, not after
            api.check_out_path(path, ends)
    if (a.clips is not None or a.lrs is not None or a.chunk is not None or a.tune_epochs is not None
            or a.tune_by is not None) and a.tune is None:
        raise ValueError("--clips, --lrs, --tune-epochs, --tune-by and --chunk are the grid of --tune, its choice and "
                         "its size: give --tune STORE too")
    if a.budgets is not None:
        return _design_groups(a)
    if a.budget is None:
        raise ValueError("give --budget (one epsilon for every client) or --budgets FILE (a budget per client)")
    try:
        d = api.design(_request(a, framework=framework))
    except api.InfeasibleBudget as exc:
        if a.json:
            print(json.dumps({"feasible": False, "budget": exc.epsilon, "min_epsilon": exc.min_epsilon, **exc.where}))
        raise
    if a.tune is not None:
        grid = {k: v for k, v in (("clips", a.clips), ("lrs", a.lrs), ("epochs", a.tune_epochs)) if v is not None}
        api.tune(d, a.tune, api.Grid(**grid), by=a.tune_by or "accuracy", progress=not a.json, chunk=a.chunk)
    out = d.to_dict()
    out["feasible"] = True
    out["notes"] = [_flagged(n, a.flags) for n in d.notes]
    cf = d.closed_form
    lines = [
        f"Recommendation for N = {d.n_clients} clients, budget epsilon = {d.budget:g}, delta = {d.delta:g}, "
        f"at most {d.max_rounds} rounds ({d.mechanism} mechanism):",
        f"  sample ratio q      {d.q:.4g}  (about {_plural(round(d.clients_per_round, 2), 'client')} a round)",
        f"  rounds T            {d.rounds}",
        *api.mechanism(d.mechanism, **(d.mechanism_options or {})).design_lines(d),
        f"  noise sigma         {d.sigma:.4g}  per client (noise multiplier on the released sum: "
        f"{d.noise_multiplier:.4g}; charged: {d.charged_noise_multiplier:.4g})",
        f"  epsilon spent       {d.epsilon:.4f}  ({api.unit_text(d.mechanism)}; {_accountant(d)}; budget "
        f"{d.budget:g})",
        f"  utility bound       {d.utility_bound:.4g}  (1/T + kappa sigma^2{' r' if 'error_ratio' in d.details else ''}"
        "/(qN): the bound on "
        "the loss above non-private training, divided by its 1/T term's constant; lower is better)",
        f"  kappa               {d.kappa:.4g}  ({d.kappa_source})",
        *([f"  predicted loss      {d.predicted_utility_loss:.4g}  (the {d.utility_model} model's utility loss "
           f"at this point)"] if d.predicted_utility_loss is not None else []),
        *([f"  Theorem 3 case      {d.case}  ({_case_text(d)})"] if d.case else []),
    ]
    if cf:
        rel = d.distance["utility_rel"]      # of two utility bounds, both positive: a percentage means something
        lines.append(f"  closed-form point   q {cf['q']:.4g}, T {cf['rounds']}, sigma {cf['sigma']:.4g} "
                     f"(utility bound {cf['utility_bound']:.4g}, from the bounds of Theorem 3; the "
                     + ("exact search's" if d.predicted_utility_loss is None else
                        f"design's (which minimises the {d.utility_model} model, not the bound)")
                     + f" is {abs(100 * rel):.2f} % {'lower' if rel <= 0 else 'higher'})")
    if d.case:
        lines.append(f"  sigma by relation   {d.sigma_relation:.4g}  (what kappa sigma^2 T = qN alone gives at this "
                     "q and T)")
    lines += _recipe_lines(d)
    lines += _local_work_lines(d)
    lines += [f"note: {n}" for n in out["notes"]]
    if a.export is not None:
        _export(a, d, out, lines)
    _finish_design(a, d, out, lines)


def _predicted_lines(design, r, out) -> list[str]:
    """The test loss the design predicted beside the one realized (issue 46,
    item 4: :func:`paretofl.api.prediction_of`, the run's ``prediction``,
    where the run trained what the prediction is of), as said and in --json."""
    p = api.prediction_of(design, r)
    if not p:
        return []
    if "not_compared" in p:
        # --json says why too: the knobs that differ, or that what the prediction is of is not recorded
        out.update(prediction_not_compared=p["not_compared"])
        differ = p["not_compared"] if isinstance(p["not_compared"], list) else None
        return [f"  predicted loss      {p['predicted_loss']:.4g} by the design, of {_recipe(p['of'])}: "
                f"{_differing(differ)}, so it is not compared"]
    interval = p["interval"]
    out.update(predicted_loss=p["predicted_loss"], predicted_interval=interval, prediction_error=p["error"],
               prediction_rederived=p["rederived"], prediction_source=p["source"])
    where = ("" if interval is None else f" [{interval[0]:.4g}, {interval[1]:.4g}]: the realized loss is "
             + ("inside" if p["inside"] else "outside") + " it")
    whose = "the design's" if p["rederived"] is not False else f"the design file's, not re-derived: {p['source']}"
    return [f"  predicted loss      {p['predicted_loss']:.4g}{where} ({whose}, docs/theory.md 4.E; realized "
            f"{r.test_loss:.4g}, {p['error']:+.3g})"]


def _num(v) -> str:
    """A knob as written: a number short, anything else as it is."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        try:
            return f"{float(v):g}"
        except OverflowError:
            pass
    text = v if isinstance(v, str) else repr(v)
    return text if len(text) <= 80 else text[:80] + "..."      # an edited file's value, cut to one line


#: a recipe's knobs as said
_KNOB_WORDS = {"clip": "C", "lr": "lr", "local_epochs": "local epochs", "batch_size": "batch size",
               "model": "model", "dataset": "dataset", "partition": "partition", "optimizer": "optimizer",
               "adaptive_clipping": "adaptive clipping"}


def _recipe(at: dict) -> str:
    """What a prediction is of, as a phrase: its C and lr, local epochs and the rest recorded."""
    parts = [_pair(at)] + ([f"{at['local_epochs']} local epoch(s)"] if at.get("local_epochs") is not None else [])
    parts += [f"{_KNOB_WORDS[k]} {_num(at[k])}" for k in ("batch_size", "model", "dataset", "partition", "optimizer")
              if at.get(k) is not None]
    if at.get("adaptive_clipping") is False:
        parts.append("C fixed")
    return ", ".join(parts)


def _differing(differ) -> str:
    """Why a run (or the design as it stands) is not what its prediction is of."""
    if differ is None:
        return "its C and lr are not recorded"
    plural = len(differ) > 1 or _KNOB_WORDS[differ[0]].endswith("s")          # "local epochs differ"
    return "this run's " + ", ".join(_KNOB_WORDS[k] for k in differ) + (" differ" if plural else " differs")


def _pair(at: dict) -> str:
    """The C and lr a prediction is of, as a phrase."""
    if at["clip"] is None or at["lr"] is None:
        return "C and lr (not recorded)"
    return f"C = {at['clip']:g}, lr = {at['lr']:g}"


def _knob(candidate: dict, key: str):
    """A candidate's mechanism (``key`` "mechanism") or one of its options."""
    return candidate.get("mechanism") if key == "mechanism" else (candidate.get("mechanism_options") or {}).get(key)


def _knob_text(key: str, value) -> str:
    if key == "mechanism":
        return str(value)
    shown = f"{value:.4g}" if isinstance(value, float) else str(value)
    return f"{key.replace('_', ' ')} {shown}"


def _fit_local_work_lines(lw: dict) -> list[str]:
    """What a fit measured of the local work: each K's (or each (K, η)'s) constants."""
    if lw.get("lrs") is None:
        return [f"  local work          local epochs {', '.join(map(str, lw['epochs']))} measured without noise "
                f"over T = {lw['rounds'][0]}-{lw['rounds'][1]} ({lw['seeds']} seeds); A(K) "
                + ", ".join(f"{x:.3g}" for x in lw["A"]) + "; c_K " + ", ".join(f"{x:.3g}" for x in lw["c"])
                + " (docs/theory.md 4.E: design chooses among them)"]
    out = [f"  local work          local epochs {', '.join(map(str, sorted(set(lw['epochs']))))} at learning rates "
           f"{', '.join(f'{x:g}' for x in sorted(set(lw['lrs'])))} measured without noise over T = "
           f"{lw['rounds'][0]}-{lw['rounds'][1]} ({lw['seeds']} seeds; docs/theory.md 4.E: design chooses the pair):"]
    for lr in sorted(set(lw["lrs"])):
        at = [i for i, x in enumerate(lw["lrs"]) if x == lr]
        out.append(f"    eta {lr:<8g}      A(K) " + ", ".join(f"{lw['A'][i]:.3g}" for i in at) + "; c_K "
                   + ", ".join(f"{lw['c'][i]:.3g}" for i in at) + " at K " + ", ".join(str(lw["epochs"][i]) for i in at)
                   + ("  (the pre-trial's own eta)" if lr == lw.get("reference_lr") else ""))
    return out


def _local_work_lines(d) -> list[str]:
    """The local work the design chose, the test loss it predicts, and what
    every other measured local epochs would do (how flat the optimum is)."""
    lw = d.local_work
    if not lw:
        return []
    dis = lw.get("dissimilarity") or {}
    out = []
    what = ("test loss, from a fit scored on samples held out of the pre-trial's training"
            if lw.get("scored_on") == "held-out" else "test loss, from a fit scored on the test split")
    if lw.get("interval"):
        lo, hi = lw["interval"]
        over = "the pre-trial's seeds" + (" and kappa's interval" if "kappa_range" in d.details else "")
        out.append(f"  predicted loss      {lw['predicted_loss']:.4g}  ({what}; 95 % interval [{lo:.4g}, {hi:.4g}] "
                   f"over {over}; docs/theory.md 4.E)")
    else:
        out.append(f"  predicted loss      {lw['predicted_loss']:.4g}  ({what}; docs/theory.md 4.E)")
    differ = d.prediction_differs()
    if differ != []:
        at = d.predicted_at()
        if differ is None:
            moved = "the C and lr it was measured at are not recorded, so no run is compared with it"
        elif d.tuning and set(differ) <= {"clip", "lr"}:
            moved = (f"the tuning moved them to C = {_num(d.clip)}, lr = {_num(d.lr)}, whose loss the fit does not "
                     f"predict (the tuning's public {d.tuning.get('select', 'accuracy')} ranked them)")
        else:
            own = d.recipe()
            moved = ("the design trains " + ", ".join("C adapting during the run (clip_quantile)"
                                                      if k == "adaptive_clipping" and own[k] is True else
                                                      f"{_KNOB_WORDS[k]} = {_num(own[k])}" for k in differ)
                     + ", whose loss the fit does not predict")
        out.append(f"                      of {_recipe(at)} (what its fit measured): {moved}")
    if dis:
        b2, z2 = dis.get("b2", float("nan")), dis.get("zeta2", float("nan"))
        out.append(f"  dissimilarity       B^2 {b2:.3g}, zeta^2 {z2:.3g}  "
                   f"(the pre-trial's public clients, partition {dis.get('partition', '?')}: the clients' updates "
                   "differ more as it grows; measure yours by partitioning the public split like your clients)")
    cands = lw["candidates"]
    varies = [k for k in ("mechanism", *sorted({o for c in cands for o in (c.get("mechanism_options") or {})}))
              if len({json.dumps(_knob(c, k)) for c in cands}) > 1]
    named = [k.replace("_", " ") for k in varies]
    chose = (f" (and the {', '.join(named[:-1]) + ' and ' if len(named) > 1 else ''}{named[-1]} its search chose "
             "there)" if varies else "")
    by_lr = lw.get("lr") is not None
    out.append("  by local epochs     T, sigma and the predicted test loss at each "
               + ("(local epochs, learning rate) " if by_lr else "") + f"the pre-trial measured{chose}:")
    for c in cands:
        mark = "  <- chosen" if (c["epochs"], c.get("lr")) == (lw["epochs"], lw.get("lr")) else ""
        own = "".join(f"{_knob_text(k, _knob(c, k))}, " for k in varies)
        eta = f" eta {c['lr']:<6g}" if by_lr else ""
        out.append(f"    {c['epochs']:>3} epoch(s){eta}    {own}T {c['rounds']}, sigma {c['sigma']:.3g}, "
                   f"q {c['q']:.3g}: loss {c['predicted_loss']:.4g}{mark}")
    if "mechanism" in varies:
        out.append("                      another local work would change the mechanism too (how clients are drawn "
                   "and how the noise is added): design with --local-epochs K to see that design whole")
    return out


def _finish_design(a, d, out, lines):
    """What every design command ends with: the saved file, the statement,
    the next step (naming the file), the figure."""
    if a.out:
        d.save(a.out)
        out["design_file"] = a.out
        lines.append(f"design written to {a.out}")
    if a.statement:
        out["statement"] = d.statement()
        lines += ["", out["statement"], ""]
    if a.export is None:
        where = _sh(a.out) if a.out else "design.json"
        known = api.names()
        flower = known["flower_framework"]
        # what Flower's wrappers release: the default mechanism's sum, fixed clipping (no option of its own)
        to_flower = d.mechanism == known["default_mechanism"] and not d.mechanism_options
        save = "" if a.out else f"save it (add --out {where}), then "
        lines.append(f"next: {save}train it with paretofl train --design {where} (the design travels whole: "
                     "mechanism, q, T, sigma, C, lr, local epochs, delta and the model and data kappa came from)"
                     + (" - it runs in paretofl's trainer only: no framework samples its groups" if d.groups else
                        f", or export it with paretofl export {where} --to "
                        + known["export_of_noise"].get(d.noise_on, flower if d.framework == flower else
                                                             "opacus --client-size N --batch-size B --clip C "
                                                             "(DP-SGD inside each client: its samples, batch and "
                                                             "per-sample clipping norm"
                                                             + ("; to run it in Flower, design it with "
                                                                "--framework flower: Flower samples its own way"
                                                                if to_flower else "") + ")"))
                     + ("; publish the privacy statement (--statement)" if not a.statement else
                        "; publish the statement above with your results")
                     + ("" if d.tuning or d.groups or d.noise_on != "sum" or "pretrial" in d.details
                        else "; choose C and lr on your public data with --tune STORE")
                     + (f"; the model trained must have the {d.mechanism_options['dim']} weights it was designed "
                        f"for (give --model and --dataset where that is not {d.model} on {d.dataset})"
                        if "dim" in (d.mechanism_options or {}) else ""))
    if getattr(a, "plot", None):
        out["plot"] = a.plot
        lines.append(f"plot written to {a.plot}")
    # the recommendation is printed before the figure is drawn: a figure that fails loses nothing
    _emit(out, a.json, "\n".join(lines))
    if getattr(a, "plot", None):
        sys.stdout.flush()
        api.design_figure(d, a.plot)


def _recipe_lines(d) -> list[str]:
    """The rest of the recipe: C, lr, local epochs and batch, and where each came from."""
    lines = []
    for name, v, key in (("clipping norm C", d.clip, "clip"), ("learning rate", d.lr, "lr"),
                         ("local epochs", d.local_epochs, "local_epochs"), ("batch size", d.batch_size, "batch_size")):
        shown = "-" if v is None else f"{v:g}"
        why = d.sources.get(key) or ("not chosen: the trainer's default" if v is None else "")
        lines.append(f"  {name:<19} {shown}" + (f"  ({why})" if why else ""))
    if d.tuning:
        best = next(g for g in d.tuning["grid"] if g["clip"] == d.clip and g["lr"] == d.lr
                    and g.get("local_epochs", d.local_epochs) == d.local_epochs)
        split = "held-out" if d.tuning.get("scored_on") else "test"      # older tunings scored the test split
        n_val = d.tuning.get("validation_samples")
        on = f" (on {n_val} held-out samples)" if type(n_val) is int and split == "held-out" else ""
        lines.append(f"  public tuning       {split} loss {best['test_loss']:.4g}, accuracy "
                     f"{100 * best['accuracy']:.1f} %{on} "
                     f"at C = {d.clip:g}, lr = {d.lr:g}, {d.local_epochs} local epoch(s) (noise on the mean "
                     f"{d.tuning['pretrial']['noise_on_mean']:.4g} "
                     f"x C, {d.tuning['pretrial']['clients']} public clients, {d.tuning['seconds']:.0f} s)")
    return lines


def _design_nbafl(a):
    """design --mechanism nbafl: NbAFL's own T* and K* (Wei et al., Remarks 4
    and 5) and what its calibration guarantees beside paretofl's."""
    if a.budget is None or a.budgets is not None or a.export is not None or a.plot is not None:
        raise ValueError("--mechanism nbafl takes one --budget (the paper's protection level epsilon), and no "
                         "--budgets, --export or --plot")
    # every flag given but those NbAFL's design reads is refused, never ignored
    reads = ("clients", "budget", "delta", "max_rounds", "mechanism")
    given = [f"--{dest.replace('_', '-')}" for dest in _REQUEST_FLAGS
             if dest not in reads and getattr(a, dest) is not None]
    given += [f"--{k.replace('_', '-')}" for k in _mechanism_options(a)]
    given += [f for f, v in (("--batch-size", a.batch_size), ("--local-steps", a.local_steps),
                             ("--tune", a.tune), ("--clips", a.clips), ("--lrs", a.lrs), ("--chunk", a.chunk),
                             ("--tune-epochs", a.tune_epochs), ("--tune-by", a.tune_by)) if v is not None]
    if given:
        raise ValueError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to --mechanism nbafl "
                         "(its design is NbAFL's own: T* and K* from Theorems 2 and 3 for --budget, --clip, "
                         "--client-size, --clients, --delta and --max-rounds)")
    if a.clip is None or a.client_size is None:
        raise ValueError("--mechanism nbafl needs --clip (the parameter clipping bound C) and --client-size "
                         "(the smallest client's samples m)")
    a.delta = api.Request.delta if a.delta is None else a.delta
    d = api.nbafl_design(a.clients, a.budget, a.delta, a.clip, a.client_size, max_rounds=a.max_rounds or 10_000)
    r = d.details
    out = d.to_dict()
    lines = [f"NbAFL's design (Wei et al. 2020) for N = {a.clients} clients of at least {a.client_size} samples, "
             f"protection level epsilon = {a.budget:g}, delta = {a.delta:g}, C = {a.clip:g}:",
             f"  rounds T*           {r['rounds']}  (minimises Theorem 2's bound with all clients: "
             f"{r['bound_all_clients']:.4g})",
             f"  clients a round K*  {r['clients_per_round']}  (minimises Theorem 3's bound at T*: "
             f"{r['bound_scheduled']:.4g})",
             f"  the paper's uplink noise sigma_U {r['sigma_uplink_paper']:.4g} guarantees epsilon "
             f"{r['epsilon_guaranteed_paper']:.4g}, not {a.budget:g} (parameter clipping bounds a client's change "
             "by 2C, not 2C/m)",
             f"  paretofl's calibration sigma_U {r['sigma_uplink_clipping']:.4g} guarantees epsilon "
             f"{r['epsilon_guaranteed_clipping']:.4g} over the {r['rounds']} uploads",
             "  constants rho, B, mu, l, beta, Theta: " + ", ".join(f"{v:g}" for v in r["constants"].values())
             + f" ({r['constants_source']}: the bounds' optima move with them)"]
    if a.out:
        d.save(a.out)
        lines.append(f"design written to {a.out}")
    if a.statement:
        out["statement"] = d.statement()
        lines += ["", out["statement"], ""]
    where = _sh(a.out) if a.out else "design.json"
    lines.append(f"next: {'' if a.out else f'save it (add --out {where}), then '}train it with paretofl train "
                 f"--design {where} --dataset fashion-mnist --model lr (or your data and model, split over its "
                 f"{a.clients} clients; the design's C, sigma, T and clients per round travel with it); "
                 "to reproduce the paper's calibration instead, paretofl train --algorithm nbafl --calibration paper "
                 f"--clients {a.clients} --epsilon {a.budget:g} --delta {a.delta:g} --rounds {r['rounds']} "
                 f"--clip {a.clip:g} --clients-per-round {r['clients_per_round']}")
    _emit(out, a.json, "\n".join(lines))


def _design_groups(a):
    """design --budgets: each group's rate (or sigma), the common T and noise."""
    for flag, v in (("--export", a.export), ("--plot", a.plot), ("--q", a.q), ("--q-min", a.q_min),
                    ("--from-store", a.from_store),
                    ("--framework flower", a.framework not in (None, "paretofl") or None), ("--tune", a.tune)):
        if v is not None:
            raise ValueError(f"{flag} does not apply with --budgets: each group's rate is designed, in paretofl's "
                             "trainer (docs/api.md says what Flower can run instead)")
    if a.budget is not None:
        raise ValueError("give --budget (one epsilon for every client) or --budgets FILE (a budget per client), "
                         "not both")
    d = api.design(_request(a))
    out = d.to_dict()
    out["feasible"], out["notes"] = True, [_flagged(n, a.flags) for n in d.notes]
    aggregate = d.noise_on == "sum"
    lines = [f"Recommendation for N = {d.n_clients} clients with budgets of their own ({len(d.groups)} groups), "
             f"delta = {d.delta:g}, at most {d.max_rounds} rounds ({d.mechanism} mechanism):",
             f"  rounds T            {d.rounds}",
             f"  clients a round     {d.cohort:.4g} expected (sum of the clients' rates; the released sum is "
             f"divided by it)"]
    if aggregate:
        lines.append(f"  noise sigma         {d.sigma:.4g}  per client (noise multiplier on the released sum: "
                     f"{d.noise_multiplier:.4g}, the same for every group)")
    lines += [f"  utility bound       {d.utility_bound:.4g}  (1/T + kappa x the noise variance of the average)",
              f"  kappa               {d.kappa:.4g}  ({d.kappa_source})",
              *([f"  local epochs K      {d.local_epochs}  ({d.sources.get('local_epochs', 'the recipe')})"]
                if d.local_epochs is not None else []),
              "  per group:  budget  clients  rate q  " + ("" if aggregate else "own sigma  ") + "epsilon spent"]
    for g in d.groups:
        lines.append(f"    {g['budget']:>14g}  {g['clients']:>7}  {g['q']:>6.4g}  "
                     + ("" if aggregate else f"{g['sigma']:>9.4g}  ") + f"{g['epsilon']:.4f}")
    lines += [f"note: {n}" for n in out["notes"]]
    _finish_design(a, d, out, lines)


def cmd_export(a):
    """export DESIGN.json --to flower|opacus|jax-privacy|tff: a saved design in a framework's terms."""
    if a.to is None and not a.statement:
        raise ValueError("give --to flower|opacus|jax-privacy|tff (the framework), or --statement (the design's "
                         "privacy statement), or both")
    given = [f for f, v in (("--clip", a.clip), ("--client-size", a.client_size), ("--batch-size", a.batch_size),
                            ("--local-steps", a.local_steps)) if v is not None]
    if a.to is None and given:
        raise ValueError(f"{', '.join(given)} only apply with --to (the framework they are for)")
    d = api.load_design(a.design)
    a.export = a.to
    out, lines = {"design_file": a.design}, [f"{a.design}: {d}"]
    if a.to is not None:
        _export(a, d, out, lines)
    if a.statement:
        out["statement"] = d.statement()
        lines += [out["statement"], ""]
    _emit(out, a.json, "\n".join(lines))


# --------------------------------------------------------------------------
# train
# --------------------------------------------------------------------------
_RUN_FLAGS = ("dataset", "data_dir", "model", "clients", "partition", "beta", "epsilon", "delta", "rounds",
              "replicas", "seed", "device", "eval_every", "strategy")
#: flags unset are passed as None: the Training's defaults (api.train_defaults) or the design's apply


def cmd_train(a):
    flag = lambda o: "--" + o.replace("_", "-")  # noqa: E731
    given = {opt: getattr(a, opt) for opt in api.algorithm_options() if getattr(a, opt, None) is not None}
    design = None
    if a.design is not None:
        design = api.load_design(a.design)
        fixed = [flag(k) for k in api.set_by_design(design) if k != "budgets"      # --budgets checks a group design
                 and (getattr(a, k, None) is not None or given.get(k) is not None)]
        if fixed:
            raise ValueError(f"{', '.join(fixed)} {'is' if len(fixed) == 1 else 'are'} set by the design {a.design}: "
                             f"drop {'it' if len(fixed) == 1 else 'them'}, or design again"
                             + ("; to reproduce the paper's calibration, train --algorithm nbafl without --design"
                                if "--calibration" in fixed else ""))
        if design.model is None and a.model is None or design.dataset is None and a.dataset is None:
            raise ValueError(f"the design {a.design} does not say which model and data its kappa was fitted for: "
                             "give --model and --dataset")
    alg = (a.algorithm or api.TRAIN_DEFAULTS["algorithm"]) if design is None else \
        api.mechanism(design.mechanism).algorithm
    per = api.algorithm_options()
    if any(alg in algs for algs in per.values()):      # an unknown algorithm: the API says so
        foreign = [flag(o) for o in given if alg not in per[o]]
        fixed_here = api.set_by_design(design) if design is not None else ()
        open_options = [o for o, algs in per.items() if alg in algs and o not in fixed_here]
        if foreign:
            raise ValueError(f"{', '.join(foreign)} {'is' if len(foreign) == 1 else 'are'} not an option of {alg}; "
                             f"its options: {', '.join(flag(o) for o in open_options)}")
    if a.history is not None:
        api.check_out_path(a.history, (".csv",))
    api.keep_freed_memory()
    run = {k: getattr(a, k) for k in _RUN_FLAGS}
    if a.budgets is not None:
        run["budgets"], run["epsilon"] = a.budgets, a.epsilon
    try:
        r = api.train(a.algorithm, history=a.history, secure=a.secure,
                      progress=not a.json and sys.stderr.isatty(), design=design, **run, **given)
    except KeyboardInterrupt:
        where = f"; the rounds done are in {a.history}" if a.history else ""
        print(f"paretofl train: interrupted{where}", file=sys.stderr)
        return EXIT_INTERRUPTED
    out = r.to_dict()
    out["unit"] = _flagged(r.unit, a.flags)           # the command line's words, as the text says it
    if a.history:
        out["history"] = a.history
    lines = []
    out["guarantee"] = r.delta < 1                     # δ = 1: the floating-point δ reached 1, nothing is promised
    if r.options.get("calibration") == "paper":          # NbAFL's option: the paper's calibration
        out["epsilon_asked"] = r.budget
        lines.append(f"WARNING: NbAFL's calibration does not meet the budget: its noise guarantees epsilon = "
                     f"{r.epsilon:.4g}, not the {r.budget:g} asked (use --calibration clipping)")
    lines += [f"{r.algorithm} on {r.dataset} ({r.model}, {_plural(r.clients, 'client')}, {r.partition}), "
              f"{_plural(a.replicas, 'replica')}, {r.seconds:.1f} s" + (f", the design {a.design}" if design else "")
              + ":",
              f"  test accuracy {r.accuracy:.4f}   test loss {r.test_loss:.4f}",
              f"  privacy spent epsilon = {r.epsilon:.4g}, delta = {r.delta:g} ({_flagged(r.unit, a.flags)}) after "
              f"{_plural(r.rounds, 'round')}"
              + (" - no guarantee: at this epsilon the noise sampler's floating-point delta reaches 1"
                 if r.delta >= 1 else "")
              + (f" (the private pre-trial's epsilon {design.details['pretrial']['epsilon']:.4g} composed in, from "
                 f"{design.details['pretrial']['source']})"
                 if design is not None and "pretrial" in design.details else ""),
              "  noise               " + ("the operating system's entropy, afresh for each replica: a release, not "
                                          "reproducible" if r.noise == "entropy" else
                                          f"seeded (--seed {a.seed}): a simulation, reproducible, and anyone with the "
                                          "seed can draw its noise again; train a real release with --secure")]
    if r.epsilon_groups:
        lines.append("  per group (budget: spent)  " + ", ".join(f"{k}: {v:.4g}" for k, v in r.epsilon_groups.items())
                     + ("  (the epsilon above is the most any group spent; each group is held to its own budget, "
                        + ("and every group met it)" if r.budget_met else "and not every group met it)")))
    lines += [f"  note: {n}" for n in r.notes]
    lines += _predicted_lines(design, r, out)
    if a.history:
        lines.append(f"  history written to {a.history}")
    _emit(out, a.json, "\n".join(lines))
    # a run that did not do what was asked is not a success: each reason on stderr, and exit 3
    for p in r.problems:
        print(f"paretofl train: warning: {p}", file=sys.stderr)
    return EXIT_INCOMPLETE if r.problems else 0


# --------------------------------------------------------------------------
# pretrial / fit / plot / validate
# --------------------------------------------------------------------------
_SPEC_FLAGS = ("dataset", "data_dir", "public_fraction", "partition", "beta", "clients", "model", "q", "sigmas",
               "rounds", "seeds", "clip", "lr", "local_epochs", "batch_size", "delta", "device", "chunk", "local_work",
               "local_lrs", "scored_on")


def _spec_from_args(a):
    """The spec file (if any), with every flag given overriding its field."""
    return api.spec(a.spec, **{k: getattr(a, k, None) for k in _SPEC_FLAGS})


def _default_results(a, suffix=".sqlite"):
    from pathlib import Path

    return str(Path(a.spec).with_suffix(suffix)) if a.spec else "pretrial" + suffix


def cmd_pretrial(a):
    spec = _spec_from_args(a)
    out = a.out if a.out is not None else _default_results(a)
    api.check_out_path(out, (".sqlite", ".db"))
    api.keep_freed_memory()
    try:
        summary = api.pretrial(spec, out, executor=a.executor, ray_address=a.ray_address,
                               progress=not a.json and sys.stderr.isatty())
    except KeyboardInterrupt:
        n = api.stored_runs(out)
        print(f"paretofl pretrial: interrupted; {_plural(n, 'run')} stored in {out} (run the same command to "
              "resume)", file=sys.stderr)
        return EXIT_INTERRUPTED
    others = summary["replicas_left_to_others"]
    text = (f"pre-trial: {_plural(summary['runs_added'], 'run')} added in {_plural(summary['jobs'], 'job')}, "
            f"{summary['seconds']:.1f} s; {_plural(summary['runs_total'], 'run')} in {out} "
            f"({summary['runs_in_spec']} in this spec)"
            + (f"; local work: {_plural(summary['local_work_added'], 'noise-free run')} added"
               if summary.get("local_work_jobs") else "")
            + (f"; {_plural(others, 'replica')} left to another process working on this store" if others else "")
            + (f"\nscored on {summary['scored_samples']} samples held out of its training"
               if summary.get("scored_on") == "held-out" else
               f"\nscored on the data set's test split ({summary.get('scored_samples')} samples)")
            + f"\nnext: paretofl fit {_sh(out)}")
    _emit(summary, a.json, text)


def cmd_fit(a):
    from pathlib import Path

    # --json prints the fit; it writes a file only where --out asks (it would overwrite one beside the store)
    out = a.out if a.out is not None or a.json else str(Path(a.results).with_name(Path(a.results).stem + "_fit.json"))
    if out is not None:
        api.check_out_path(out, (".json",))  # before the work, not after it
    r = api.fit(a.results, epsilon=a.epsilon, reference=a.reference, bootstrap=a.bootstrap)
    if out is not None:
        r.save(out)
    d = r.to_dict()
    d["fit_file"] = out
    ci = lambda v: f"[{v[0]:.4g}, {v[1]:.4g}]" if all(map(math.isfinite, v)) else "none"  # noqa: E731
    pct = f"{100 * r.within_fraction:.0f} %" if math.isfinite(r.within_fraction) else "(no interval)"
    lines = [
        f"fit of {a.results}: {_plural(r.n_runs, 'run')}, {_plural(r.n_seeds, 'seed')}, front of "
        f"{_plural(r.n_front, 'configuration')} ({r.n_fit} inside the grid used for kappa)",
        f"  kappa               {r.kappa:.4g}   interval {ci(r.kappa_ci)}: {r.kappa_ci_method}",
        f"  slope log T/log sigma {r.slope:.3g}  interval {ci(r.slope_ci)}  (theory: -2)",
        f"  front on relation   {pct} of front points within the interval "
        f"(mean |ln T - ln T_relation| = {r.distance:.3g})",
        f"  epsilon             {r.epsilon_model};  reference: "
        + (f"the least noisy run, {r.reference} (a private pre-trial runs none without noise)" if r.private
           else f"non-private run, {r.reference}"),
        *([f"  private pre-trial   spent epsilon {r.private_epsilon:.4g} on the clients' data ("
           f"{api.unit_text(api.names()['default_mechanism'])}; every run its spend log charged, composed); a design "
           "with this fit takes it out of its budget"] if r.private else []),
        *(_fit_local_work_lines(r.local_work) if r.local_work else []),
        *([f"fit written to {out}"] if out else [])]
    lines += [f"note: {n}" for n in r.notes]
    if r.utility_models:
        cv = ", ".join(f"{k} {m['cv_error']:.3g}" for k, m in r.utility_models.items())
        lines.append(f"  utility model       the data prefer '{r.preferred_model}' (held-out-seed error: {cv}; "
                     f"design --from-store uses it)")
    if r.problems and all(p.startswith("the front disagrees") for p in r.problems):
        lines += [f"problem: {p}" for p in r.problems]
        lines.append(f"next: paretofl design --from-store {_sh(a.results)} --clients N --budget EPS --max-rounds T "
                     f"(the empirical mode), or --fit {_sh(out) if out else 'FIT.json'} to use the closed form all "
                     "the same")
    elif r.problems:
        lines += [f"problem: {p}" for p in r.problems]
        if r.blocking and r.blocking[0].startswith(api.FIT_FRONT_ONLY) and r.utility_models:
            lines.append(f"design --fit refuses this fit (its front, not its training); what works on this store "
                         f"today: paretofl design --from-store {_sh(a.results)} --clients N --budget EPS "
                         "--max-rounds T")
        elif r.blocking:
            lines.append(f"design --fit refuses this fit: {r.blocking[0].split(':')[0]}; fix that and fit again")
        else:
            lines.append(f"next: paretofl design --fit {_sh(out) if out else 'FIT.json'} --clients N --budget EPS "
                         "--max-rounds T "
                         "(mind the problems above)")
    else:
        lines.append(f"next: paretofl design --fit {_sh(out) if out else 'FIT.json'} --clients N --budget EPS "
                     "--max-rounds T")
    _emit(d, a.json, "\n".join(lines))


def cmd_plot(a):
    paths = api.pretrial_figures(a.results, a.fit, a.out_dir, fmt=a.format.lower(), max_rounds=a.max_rounds,
                                 epsilon=a.epsilon)
    lines = [f"plot written to {p}" for p in paths]
    try:
        spend = api.pretrial_spend(store=a.results)
    except ValueError as exc:            # a store no design may be made from: still plotted, and said
        spend = None
        lines.append(f"note: {exc}")
    out = {"plots": paths, "pretrial_epsilon": None if spend is None else spend.epsilon}
    if spend is not None:
        lines.append(f"note: this private pre-trial spent epsilon {spend.epsilon:.4g} on the clients' data "
                     f"({api.unit_text(api.names()['default_mechanism'])}, all its runs composed, from "
                     f"{spend.source}); each point's epsilon in the figures is its own run's alone")
    _emit(out, a.json, "\n".join(lines))


def cmd_validate(a):
    from pathlib import Path

    spec = _spec_from_args(a)
    outdir = Path(a.out_dir) if a.out_dir is not None else Path(".")
    if not outdir.is_dir():
        raise ValueError(f"output folder {outdir} " + ("is a file, not a folder" if outdir.exists() else
                                                        "does not exist"))
    r = api.validate(spec, outdir, full_fraction=a.full_fraction, budget=a.budget, executor=a.executor,
                     ray_address=a.ray_address, progress=not a.json and sys.stderr.isatty())
    _emit({k: v for k, v in r.items() if k != "report"}, a.json, "\n".join(r["report"]))


# --------------------------------------------------------------------------
# audit
# --------------------------------------------------------------------------
def cmd_audit(a):
    api.audit_jobs(a.mechanism, a.broken)    # a bad name is refused before anything runs
    api.keep_freed_memory()
    rows = api.audit(a.mechanism, a.broken, runs=a.runs, seed=a.seed, progress=not a.json)
    lines = [f"{'setting':31s} {'broken':18s} {'claimed eps':>11s} {'lower bound':>11s} {'runs':>8s}  verdict"]
    for r in rows:
        verdict = "VIOLATED: leaks more than claimed" if r.violated else "consistent"
        if "epsilon_paper" in r.details:
            verdict += (f" (NbAFL's nominal eps {r.details['epsilon_paper']:g} is "
                        f"{'exceeded' if r.epsilon_lower > r.details['epsilon_paper'] else 'not contradicted'})")
        lines.append(f"{r.setting:31s} {r.broken:18s} {r.epsilon_claimed:11.4g} {r.epsilon_lower:11.3f} "
                     f"{r.runs:8d}  {verdict}")
    deltas = sorted({r.delta for r in rows})
    lines.append(f"(one release each; lower bounds hold with 95 % confidence, delta = "
                 f"{', '.join(f'{d:g}' for d in deltas)})")
    _emit([r.as_dict() for r in rows], a.json, "\n".join(lines))
    # a real mechanism caught leaking more than paretofl reports is a failure
    return 1 if any(r.violated and r.broken == "none" for r in rows) else 0


# --------------------------------------------------------------------------
# the command line's flags: one function a command
# --------------------------------------------------------------------------
def _add_account(sub):
    """The `account` command's flags."""
    s = sub.add_parser("account", help="epsilon of a sequence of Gaussian steps")
    s.add_argument("--sigma", type=FLOAT, required=True, help="noise multiplier of each step's release")
    s.add_argument("--q", type=FLOAT, required=True, help="sampling rate in (0, 1]")
    s.add_argument("--steps", type=INT, required=True, help="number of steps")
    s.add_argument("--delta", type=FLOAT, default=1e-5, help="the delta of (epsilon, delta)")
    s.add_argument("--sampling", choices=("poisson", "attributed", "fixed-size", "none", "attributed-integer"),
                   default="poisson",
                   help="poisson: who took part is hidden, add/remove (sigma over the add/remove sensitivity, "
                        "C for a sum of updates clipped to C); attributed: seen (local view); fixed-size: m of n "
                        "without replacement, replace-one: sigma over the replace-one sensitivity, 2C for a sum "
                        "of updates clipped to C, so a Flower design of noise multiplier z is --sigma z/2; none: "
                        "no amplification (q ignored); attributed-integer: seen, read at integer orders (the "
                        "distributed mechanism's Skellam bound)")
    s.add_argument("--accountant", choices=("rdp", "prv", "both"), default="rdp",
                   help="rdp (no torch), Opacus's PRV accountant, or both (reports the larger)")
    s.add_argument("--conversion", choices=("improved", "classic"), default="improved",
                   help="RDP to (epsilon, delta) conversion")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=cmd_account)



def _add_pareto(sub):
    """The `pareto` command's flags."""
    s = sub.add_parser("pareto", help="the closed-form Pareto set (Theorem 3) for a fixed q")
    s.add_argument("--clients", type=INT, required=True, help="number of clients N")
    s.add_argument("--q", type=FLOAT, required=True, help="sample ratio q")
    s.add_argument("--kappa", type=FLOAT, required=True, help="the constant of kappa sigma^2 T = qN")
    s.add_argument("--sigma-min", type=FLOAT, required=True, help="smallest sigma")
    s.add_argument("--sigma-max", type=FLOAT, required=True, help="largest sigma")
    s.add_argument("--max-rounds", type=FLOAT, required=True, help="efficiency budget T-tilde")
    s.add_argument("--integer", action="store_true", help="integer rounds: sigma-intervals per T")
    s.add_argument("--points", type=INT, default=50, help="samples per continuous piece")
    s.add_argument("--delta", type=FLOAT, default=1e-5, help="delta for the plot's epsilon axis")
    s.add_argument("--plot", help="write the sigma-T plane and the objective-space front (.png/.pdf/.svg)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=cmd_pareto)



def _add_design(sub, known):
    """The `design` command's flags."""
    s = sub.add_parser("design", help="recommend q, T and sigma for a privacy budget")
    s.add_argument("--clients", type=INT, required=True, help="number of clients N")
    s.add_argument("--budget", type=FLOAT, help="privacy budget epsilon, the same for every client (or --budgets)")
    s.add_argument("--budgets", metavar="FILE", help="clients with budgets of their own: a CSV file with the header "
                                                     "client,epsilon (a line per client) or share,epsilon (a line "
                                                     "per group)")
    s.add_argument("--delta", type=FLOAT, help=f"the delta of (epsilon, delta); keep it below 1/N (default "
                                                f"{api.Request.delta:g})")
    s.add_argument("--max-rounds", type=INT, help="efficiency budget, required: the most rounds T~ (or give "
                                                  "--time-budget with --round-time)")
    s.add_argument("--time-budget", type=FLOAT, help="efficiency budget: total time (with --round-time); with "
                                                      "--max-rounds too, the tighter binds")
    s.add_argument("--round-time", type=FLOAT, help="time of one round")
    s.add_argument("--q", type=FLOAT, help="fix the sample ratio (default: search q over [--q-min, --q-max])")
    s.add_argument("--q-min", type=FLOAT, help="smallest q searched (default 1/N)")
    s.add_argument("--q-max", type=FLOAT, help="largest q searched, e.g. a cohort limit over N (default 1)")
    s.add_argument("--sigma-min", type=FLOAT, help=f"smallest noise multiplier per client allowed (default "
                                                    f"{api.Request.sigma_min:g})")
    s.add_argument("--sigma-max", type=FLOAT, help=f"largest noise multiplier per client allowed (default "
                                                    f"{api.Request.sigma_max:g})")
    s.add_argument("--kappa", type=FLOAT, help="the constant of kappa sigma^2 T = qN (default: the shipped LR fit)")
    s.add_argument("--local-epochs", type=INT, help="fix the clients' local epochs (default: chosen where the fit "
                   "measured the local work, else the pre-trial's)")
    s.add_argument("--partition", help="how your clients' data are split: iid, dirichlet:ALPHA, shards:K or given "
                   "(checked against the partition the pre-trial measured the local work on)")
    s.add_argument("--fit", help="fit file from `paretofl fit` (gives kappa)")
    s.add_argument("--from-store", help="the empirical mode: fit a utility model to this pre-trial store and "
                                        "minimise it under the exact accountant, instead of the closed form")
    s.add_argument("--utility-model", choices=("bound", "bend"),
                   help="with --from-store: the bound (1.2) with free constants, or one that bends (adds a term "
                        "growing with sigma^2 T) (default: the one the store's held-out seeds prefer)")
    s.add_argument("--mechanism", choices=(*known["designable"], *known["own_design"], known["search"]),
                   default=known["default_mechanism"],
                   help="what is released and charged (docs/theory.md, sections 5.3 and 7); auto: the lowest "
                        "bound of client-aggregate, bandmf and bandmf-amplified")
    for o, (kind, text, mechs) in known["mechanism_option_flags"].items():     # each family's own knobs
        s.add_argument("--" + o.replace("_", "-"), type=INT if kind == "int" else FLOAT,
                       help=f"{', '.join(mechs)}: {text}")
    s.add_argument("--framework", choices=known["frameworks"],
                   help="where a client-aggregate design runs: paretofl's trainer (Poisson client sampling), Flower "
                        "(m of N without replacement, accounted by paretofl: the flower mechanism), or Flower with "
                        "its own accountant on (the flower-accounted mechanism) (default: paretofl, or flower with "
                        "--export flower)")
    s.add_argument("--export", choices=known["exports"],
                   help="print the design in the framework's own parameters, with a snippet (jax-privacy: a bandmf "
                        "design's correlated noise)")
    s.add_argument("--clip", type=FLOAT, help="clipping norm C for --export (flower: default the recipe's C; "
                                               "opacus: the per-sample norm, required) and for --mechanism nbafl")
    s.add_argument("--tune", metavar="STORE", help="choose C and the learning rate on this pre-trial's public share: "
                                                   "train the --clips x --lrs grid at the design's T and noise")
    s.add_argument("--clips", type=FLOAT, nargs="+",
                   help="with --tune: clipping norms to try (default 0.03 0.1 0.3 1 3)")
    s.add_argument("--tune-by", choices=("accuracy", "loss"),
                   help="with --tune: keep the pair with the highest accuracy (default) or lowest loss on public "
                        "samples held out of the tuning's training")
    s.add_argument("--lrs", type=FLOAT, nargs="+", help="with --tune: learning rates to try (default 0.03 0.1 0.3 1)")
    s.add_argument("--tune-epochs", type=INT, nargs="+", help="with --tune: local epochs to try beside C and lr "
                   "(default: the design's; a design whose fit measured the local work chose them, and the tuning "
                   "keeps them)")
    s.add_argument("--chunk", type=INT, help="with --tune: most replicas trained together (lower it for a large "
                                             "model that does not fit in memory)")
    s.add_argument("--statement", action="store_true",
                   help="print the privacy statement to publish (guarantee, unit, neighbours, what is released, "
                        "who is trusted, sampling, accountant, the hyperparameters' privacy cost)")
    s.add_argument("--client-size", type=INT, help="--export opacus: samples per client; --mechanism nbafl: the "
                                                   "smallest client's samples")
    s.add_argument("--batch-size", type=INT, help="--export opacus: DP-SGD batch size")
    s.add_argument("--local-steps", type=INT, help="--export opacus: DP-SGD steps per round")
    s.add_argument("--out", help="write the design to this file (.json): paretofl train --design and paretofl export "
                                 "read it")
    s.add_argument("--plot", help="write the design figure (.png/.pdf/.svg)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=cmd_design)



def _add_export(sub, known):
    """The `export` command's flags."""
    s = sub.add_parser("export", help="a saved design (design --out) in Flower's or Opacus's own parameters")
    s.add_argument("design", help="the design file (.json) written by design --out")
    s.add_argument("--to", choices=known["exports"],
                   help="the framework (jax-privacy: a bandmf design's correlated noise; tff: a distributed design's "
                        "DistributedDpSumFactory)")
    s.add_argument("--clip", type=FLOAT, help="flower: the clipping norm C (default: the design's); opacus: the "
                                               "per-sample norm, required")
    s.add_argument("--client-size", type=INT, help="opacus: samples per client")
    s.add_argument("--batch-size", type=INT, help="opacus: DP-SGD batch size")
    s.add_argument("--local-steps", type=INT, help="opacus: DP-SGD steps per round")
    s.add_argument("--statement", action="store_true",
                   help="also print the design's privacy statement (its epsilon re-derived, as every reader's is)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=cmd_export)



def _add_train(sub, known, DATA, MODEL):
    """The `train` command's flags."""
    s = sub.add_parser("train", help="run DP federated learning (vectorised over clients and replicas)")
    D = api.train_defaults()
    s.add_argument("--algorithm", choices=known["algorithms"],
                   help=f"the algorithm (default: the design's, else {D['algorithm']})")
    s.add_argument("--design", metavar="FILE", help="train exactly this design (design --out): its mechanism, q, T, "
                                                    "sigma, C, lr, delta, groups, and the model and data its kappa "
                                                    "was fitted for")
    s.add_argument("--dataset", type=DATA,
                   help=f"data set: {', '.join(known['datasets'])}, or your loader as package.module:function "
                        f"(default: the design's, else {D['dataset']})")
    s.add_argument("--data-dir", help="folder with the IDX files, or a torchvision root")
    s.add_argument("--model", type=MODEL,
                   help=f"model: {', '.join(known['models'])}, or your factory as package.module:function "
                        f"(default: the design's, else {D['model']})")
    s.add_argument("--strategy", choices=("auto", "loop", "vmap"), default=D["strategy"],
                   help="your model's clients: a loop, or batched under vmap (auto: loop on CPU, vmap on CUDA)")
    s.add_argument("--clients", type=INT, default=None,
                   help="number of clients N (default: the data's own clients with --partition given, else 10)")
    s.add_argument("--partition", default=None,
                   help=f"how the data is split: {', '.join(known['partitions'])}, dirichlet:ALPHA (concentration "
                        "ALPHA) or shards:K (K label shards a client) (default: given when the data has client ids, "
                        "else iid)")
    s.add_argument("--beta", type=FLOAT, default=D["beta"],
                   help="Dirichlet concentration of --partition dirichlet (default 0.5); the same as --partition "
                        "dirichlet:BETA")
    s.add_argument("--epsilon", type=FLOAT,
                   help=f"privacy budget; a replica stops when it is spent (default {D['epsilon']:g})")
    s.add_argument("--budgets", metavar="FILE", help="clients with budgets of their own (CSV: client,epsilon or "
                                                     "share,epsilon): the group design for --rounds rounds at most "
                                                     "is made with the shipped kappa and trained, each group stopped "
                                                     "at its own budget (with your own kappa: design --budgets ... "
                                                     "--out FILE, then train --design FILE); beside --design, the "
                                                     "group design is checked to put each client in its own "
                                                     "budget's group")
    s.add_argument("--delta", type=FLOAT, help=f"the delta of (epsilon, delta) (default {D['delta']:g})")
    s.add_argument("--rounds", type=INT, help="communication rounds asked for: stopping before them (the budget "
                   f"ran out) is a warning and exit 3 (default: until the budget is spent, at most {D['rounds']})")
    s.add_argument("--replicas", type=INT, default=D["replicas"], help="independent seeds run side by side")
    s.add_argument("--seed", type=INT, default=D["seed"], help="first seed")
    s.add_argument("--secure", action="store_true",
                   help="a real release on your clients' data: every random generator seeded from the operating "
                        "system's entropy, afresh for each replica (not reproducible; --seed only labels replicas). "
                        "Without it a run is a simulation: anyone with its seed can draw its noise again")
    s.add_argument("--device", choices=("cpu", "cuda"), default=D["device"], help="where to train")
    s.add_argument("--eval-every", type=INT, default=D["eval_every"],
                   help="evaluate the test set every this many rounds")
    s.add_argument("--history", help="write the per-round history here (.csv), row by row")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    g = s.add_argument_group("algorithm options (each algorithm takes only its own; defaults per algorithm)")
    for opt, per_alg in api.algorithm_options().items():
        kinds = {type(d) for d, _, _, _ in per_alg.values() if d is not None}
        kinds = kinds or set().union(*(k for _, _, _, k in per_alg.values()))
        typ = INT if kinds == {int} else (str if str in kinds else (FLOAT if kinds & {int, float} else str))
        (default0, help0, choices, _) = next(iter(per_alg.values()))
        helps = {alg: h for alg, (_, h, _, _) in per_alg.items()}
        if len(set(helps.values())) > 1:            # one flag, a meaning per algorithm: say each
            first = {}
            for alg, h in helps.items():
                first.setdefault(h, []).append(alg)
            help0 = "; ".join(f"{'/'.join(algs)}: {h}" for h, algs in first.items())
        values = {d for d, _, _, _ in per_alg.values()}
        defaults = (f"{default0}" if len(values) == 1 else
                    "; ".join(f"{alg}: {'unset (its own rule)' if d is None else d}"
                              for alg, (d, _, _, _) in per_alg.items()))
        g.add_argument("--" + opt.replace("_", "-"), dest=opt, type=typ if choices is None else str,
                       choices=choices, default=None,
                       help=f"{help0} [{', '.join(per_alg)}; default {defaults}]".replace("%", "%%"))
    s.set_defaults(func=cmd_train)



def _spec_flags(s, known, DATA, MODEL):
    """The flags of a pre-trial spec (pretrial, validate)."""
    s.add_argument("spec", nargs="?", help="pre-trial spec (TOML); flags below override its fields")
    s.add_argument("--dataset", type=DATA,
                   help=f"data set: {', '.join(known['datasets'])}, or your loader as package.module:function")
    s.add_argument("--data-dir", help="folder with the IDX files, or a torchvision root")
    s.add_argument("--public-fraction", type=FLOAT, help="share of the training set the pre-trial uses")
    s.add_argument("--partition", help=f"how the data is split: {', '.join(known['partitions'])}, dirichlet:ALPHA "
                                        "(concentration ALPHA) or shards:K (K label shards a client)")
    s.add_argument("--beta", type=FLOAT, help="Dirichlet concentration of --partition dirichlet (the same as "
                                              "--partition dirichlet:BETA)")
    s.add_argument("--clients", type=INT, help="number of clients N")
    s.add_argument("--model", type=MODEL,
                   help=f"model: {', '.join(known['models'])}, or your factory as package.module:function")
    s.add_argument("--q", type=FLOAT, nargs="+", help="client sample ratio(s)")
    s.add_argument("--sigmas", type=FLOAT, nargs="+", help="noise multipliers of the grid")
    s.add_argument("--rounds", type=INT, nargs="+", help="rounds T of the grid")
    s.add_argument("--seeds", type=INT, help="seeds per configuration")
    s.add_argument("--clip", type=FLOAT, help="clipping bound C")
    s.add_argument("--lr", type=FLOAT, help="clients' learning rate")
    s.add_argument("--local-epochs", type=INT, help="local epochs")
    s.add_argument("--local-work", type=INT, nargs="+", help="also measure these local epochs without noise "
                   "(e.g. 1 2 4 8; public data only): the design then chooses the local work")
    s.add_argument("--local-lrs", type=FLOAT, nargs="+", help="also measure that local work at these clients' "
                   "learning rates besides --lr (e.g. 0.025 0.05): the design then chooses the learning rate with "
                   "the local epochs")
    s.add_argument("--batch-size", type=INT, help="local batch size")
    s.add_argument("--scored-on", choices=("held-out", "test"),
                   help="where each run's loss is scored: 20%% of each client's samples held out of its training "
                        "(default), or the data set's test split (stores made before 2026-11-27; a private pre-trial)")
    s.add_argument("--delta", type=FLOAT, help="the delta of the privacy objective")
    s.add_argument("--device", choices=("cpu", "cuda"), help="where to train")
    s.add_argument("--chunk", type=INT, help="most replicas (sigma, seed) trained together in one job (lower it "
                                             "for a large model that does not fit in memory)")
    s.add_argument("--executor", choices=("local", "ray"), default="local", help="where jobs run")
    s.add_argument("--ray-address", help="Ray cluster address (default: $RAY_ADDRESS, else a local Ray)")
    s.add_argument("--json", action="store_true", help="print one JSON object")



def _add_pretrial(sub, known, DATA, MODEL):
    """The `pretrial` command's flags."""
    s = sub.add_parser("pretrial", help="run a sigma x T grid of client-level DP-FedAvg into a results store")
    _spec_flags(s, known, DATA, MODEL)
    s.add_argument("--out", help="results store (.sqlite; default: the spec's name)")
    s.set_defaults(func=cmd_pretrial)



def _add_fit(sub):
    """The `fit` command's flags."""
    s = sub.add_parser("fit", help="experimental Pareto front and kappa from a results store")
    s.add_argument("results", help="results store written by `paretofl pretrial`")
    s.add_argument("--out", help="fit file (.json; default RESULTS_fit.json)")
    s.add_argument("--epsilon", choices=("exact", "asymptotic"), default="exact",
                   help="privacy objective: RDP accountant or model (1.1)")
    s.add_argument("--reference", choices=("best", "final", "same-rounds"), default="best",
                   help="non-private reference: its best T, its largest T, or the same T")
    s.add_argument("--bootstrap", type=INT, default=1000, help="bootstrap resamples of the seeds")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=cmd_fit)



def _add_plot(sub):
    """The `plot` command's flags."""
    s = sub.add_parser("plot", help="figures of a pre-trial: sigma-T plane, objective space, Theorem 3")
    s.add_argument("results", help="results store written by `paretofl pretrial`")
    s.add_argument("--fit", help="fit file (default: fitted now, not saved)")
    s.add_argument("--out-dir", help="folder for the figures, made if missing (default: beside RESULTS)")
    s.add_argument("--format", choices=("png", "pdf", "svg"), default="png", help="file format")
    s.add_argument("--max-rounds", type=FLOAT, help="T-tilde of the Theorem 3 panel (default: largest T run)")
    s.add_argument("--epsilon", choices=("exact", "asymptotic"), default="exact", help="privacy objective")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(func=cmd_plot)



def _add_validate(sub, known, DATA, MODEL):
    """The `validate` command's flags."""
    s = sub.add_parser("validate", help="kappa from the public fraction, checked against a full-data sweep")
    _spec_flags(s, known, DATA, MODEL)
    s.add_argument("--full-fraction", type=FLOAT, default=1.0, help="share of the training set of step 2")
    s.add_argument("--budget", type=FLOAT, help="epsilon of the design checked (default: middle of the full front)")
    s.add_argument("--out-dir", help="folder for both stores and fits (default: here)")
    s.set_defaults(func=cmd_validate)



def _add_audit(sub):
    """The `audit` command's flags."""
    audited = api.audit_names()
    s = sub.add_parser("audit", help="empirical lower bounds on epsilon of every mechanism, beside the claimed one")
    s.add_argument("--mechanism", nargs="+", default=["all"],
                   choices=("all", *audited["mechanisms"], *[x for x in audited["settings"]
                                                             if x not in audited["mechanisms"]]),
                   help="mechanisms (each with all its audit settings) or single settings to audit")
    s.add_argument("--break", dest="broken", choices=("none", *audited["breaks"], "all"), default="none",
                   help="audit a deliberately broken copy (docs/results.md, section 1), or all of each setting's")
    s.add_argument("--runs", type=INT, default=200000, help="releases per setting, half with the canary")
    s.add_argument("--seed", type=INT, default=0, help="seed of the runs")
    s.add_argument("--json", action="store_true", help="print a JSON list")
    s.set_defaults(func=cmd_audit)


def build_parser() -> argparse.ArgumentParser:
    known = api.names()
    DATA = _name_or_reference(known["datasets"], "data loader")
    MODEL = _name_or_reference(known["models"], "model factory")

    p = _Parser(prog="paretofl", description="Utility-privacy Pareto design for DP federated learning: "
                                             "how to set q, T and sigma for a privacy budget.")
    p.add_argument("--version", action="version", version=f"paretofl {api.__version__}")
    sub = p.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")
    _add_account(sub)
    _add_pareto(sub)
    _add_design(sub, known)
    _add_export(sub, known)
    _add_train(sub, known, DATA, MODEL)
    _add_pretrial(sub, known, DATA, MODEL)
    _add_fit(sub)
    _add_plot(sub)
    _add_validate(sub, known, DATA, MODEL)
    _add_audit(sub)
    return p


#: what users of other tools call a flag of ours (Opacus's target_epsilon, a budget in train's words)
_SYNONYMS = {"--epsilon": ("--budget",), "--target-epsilon": ("--budget", "--epsilon"),
             "--eps": ("--budget", "--epsilon"), "--budget": ("--epsilon",),
             "--noise-multiplier": ("--sigma",), "--max-grad-norm": ("--clip",), "--rounds": ("--max-rounds",),
             "--n-clients": ("--clients",), "--num-clients": ("--clients",),
             "--beta": ("--partition",)}       # design names a Dirichlet split dirichlet:ALPHA


def _did_you_mean(extra: list, sub) -> str:
    """' (did you mean --budget? ...)' for the first unknown option a close flag
    of this command (or a synonym from another tool's words) matches."""
    import difflib

    flags = [f for a in sub._actions for f in a.option_strings if f.startswith("--")]
    for word in extra:
        if not word.startswith("-") and f"--{word}" in flags:      # a flag's name without its dashes
            return f" (did you mean --{word}? see {sub.prog} --help)"
        if not word.startswith("--") or word == "--":
            continue
        opt = word.split("=", 1)[0]
        if opt in flags:        # after a "--" (one before the command is refused before parsing)
            return f" ({opt} is an option of {sub.prog}: give it after the command, before any --)"
        if opt == "--version":
            return " (the version is paretofl --version)"
        near = [f for f in _SYNONYMS.get(opt, ()) if f in flags] or \
            difflib.get_close_matches(opt, flags, n=1, cutoff=0.8)
        if near:
            return f" (did you mean {near[0]}? see {sub.prog} --help)"
    return f" (see {sub.prog} --help)"


def _unknown_flags(words: list, sub) -> list:
    """The words of a command line that are written as flags (--name, before
    any lone --) and are none of this command's."""
    flags = {f for a in sub._actions for f in a.option_strings}
    out = []
    for w in words:
        if w == "--":
            break
        if w.startswith("--") and w.split("=", 1)[0] not in flags:
            out.append(w.split("=", 1)[0])
    return out


def main(argv=None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        parser.print_help()
        return 0
    if argv[0].startswith("-") and argv[0].split("=")[0] not in ("-h", "--help", "--version"):
        parser.error(f"the command comes first: paretofl COMMAND [options] (got {argv[0]} before it; see paretofl "
                     "--help)")
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    if argv[0] in subs:         # an unknown flag is named before argparse reads its value as a positional or
        unknown = _unknown_flags(argv[1:], subs[argv[0]])      # reports the required flags it stands for missing
        if unknown:
            subs[argv[0]].error(f"unknown flag {' '.join(unknown)}{_did_you_mean(unknown, subs[argv[0]])}")
    args, extra = parser.parse_known_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[args.command]
    if extra:
        sub.error(f"unrecognized arguments: {' '.join(extra)}{_did_you_mean(extra, sub)}")
    args.flags = _Flags(_flag_map(args.command, sub))
    if hasattr(args, "spec"):
        # a spec's field is named as the file names it where the file set it, and as its flag where a flag did
        # (plain words too: --clients, --lr)
        given = {a.dest: a.option_strings[-1] for a in sub._actions
                 if a.option_strings and a.dest in _SPEC_FLAGS and getattr(args, a.dest, None) is not None}
        args.flags = _Flags({**{k: v for k, v in args.flags.items() if k not in _SPEC_FLAGS or not args.spec},
                             **given})
    args.flags.given = tuple(w for w in argv[1:] if not w.startswith("-"))      # said back as typed
    try:
        return _run(args)
    except BrokenPipeError:
        # the reader went away (`paretofl design ... | head`): nothing more to say to it; Python's recipe
        # (docs of the signal module): point stdout at devnull so the exit's flush does not raise again
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):     # a stdout with no file (a test's capture)
            pass
        return 1


def _run(args) -> int:
    try:
        rc = args.func(args)
    except ModuleNotFoundError as exc:
        extra = _extra((exc.name or "").split(".")[0])
        if extra is None:
            raise
        print(f"paretofl {args.command}: error: this needs {exc.name}, which is not installed: "
              f"pip install 'paretofl[{extra}]'", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"paretofl {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        raise                       # not the command's error: the reader of its output left (main)
    except (ValueError, OSError, ArithmeticError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
            msg = f"cannot write or read {exc.filename}: {exc.strerror.lower()}"   # not Python's "[Errno 20] ..."
        if isinstance(exc, ArithmeticError):
            msg = f"a number is out of range ({msg})"
        print(f"paretofl {args.command}: error: {_flagged(msg, args.flags, error=True)}", file=sys.stderr)
        return EXIT_USAGE
    return rc or 0


if __name__ == "__main__":
    sys.exit(main())
