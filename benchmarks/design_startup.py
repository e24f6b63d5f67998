"""Whole-process time of `paretofl design` for every designable mechanism
(median of 5 runs per scenario, after one untimed run; wall and CPU time),
and a check that no scenario imports torch or flwr.

    make bench            # or: .venv/bin/python benchmarks/design_startup.py [--json] [--runs K] [--only TEXT]
                          #     [--no-bytecode] [--before DIR] [--floor]

``--only TEXT`` runs the scenarios whose name contains TEXT.  The untimed
run of each scenario goes through ``python -c`` and reports which heavy
packages the process imported.  Python's compiled bytecode is kept (in a
temporary PYTHONPYCACHEPREFIX, written by the untimed run), as an installed
package has it, even where PYTHONDONTWRITEBYTECODE is set; ``--no-bytecode``
compiles paretofl's sources on every start instead (about 0.1-0.2 s more).
``--before DIR`` times another checkout of paretofl (``git worktree add DIR
REV``) beside this one, run for run in turn, and prints both: on a machine
whose speed drifts, only such a ratio means much.

``--floor`` measures where the time goes instead: in one process per
scenario, the CPU time of importing the CLI, of the first design (cold), and
the least of two more of the same design (warm: every accountant answer is
then remembered, so what is left is the search's own Python).  Import plus
warm is a floor no faster accountant goes below.
"""

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PAR = str(Path(sys.executable).with_name("paretofl"))
BASE = ["--clients", "100", "--budget", "2", "--max-rounds", "500"]
SCENARIOS = {
    "N=100, q searched (demo)": BASE,
    "N=100, q=0.1 fixed": [*BASE, "--q", "0.1"],
    "N=10, q searched": ["--clients", "10", "--budget", "2", "--max-rounds", "200"],
    "N=1000, q=0.05 fixed, eps=1": ["--clients", "1000", "--budget", "1", "--max-rounds", "2000", "--q", "0.05"],
    "N=1000, q searched, eps=1": ["--clients", "1000", "--budget", "1", "--max-rounds", "2000"],
    "N=100, budgets 1/2/8 (3 groups)": ["--clients", "100", "--budgets", "BUDGETS", "--max-rounds", "200"],
    "N=100, client-local": [*BASE, "--mechanism", "client-local"],
    "N=100, bandmf": [*BASE, "--mechanism", "bandmf"],
    "N=100, bandmf-amplified": [*BASE, "--mechanism", "bandmf-amplified"],
    "N=100, --framework flower": [*BASE, "--framework", "flower"],
    "N=100, --framework flower-accounted": [*BASE, "--framework", "flower-accounted"],
    "N=100, nbafl (C=1, m=600)": [*BASE, "--mechanism", "nbafl", "--clip", "1", "--client-size", "600"],
    "N=100, auto": [*BASE, "--mechanism", "auto"],
    "N=100, distributed (LR: 7850 weights)": [*BASE, "--mechanism", "distributed", "--dim", "7850"],
    "N=1000, distributed, 16 bits, eps=2": ["--clients", "1000", "--budget", "2", "--max-rounds", "200",
                                            "--mechanism", "distributed", "--dim", "7850", "--bits", "16"],
    "N=10^4, bandmf, cohort <= 100": ["--clients", "10000", "--budget", "2", "--max-rounds", "1000",
                                      "--q-max", "0.01", "--mechanism", "bandmf"],
    "N=10^4, auto, cohort <= 100": ["--clients", "10000", "--budget", "2", "--max-rounds", "1000",
                                    "--q-max", "0.01", "--mechanism", "auto"],
}
HEAVY = ("torch", "flwr", "matplotlib", "scipy", "opacus", "pandas")


def imported(args, env) -> list[str]:
    """The heavy packages one in-process design imports."""
    code = (f"import sys; from paretofl.cli import main; main(['design', *{args!r}, '--json']); "
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env)
    return json.loads(r.stderr.strip().splitlines()[-1].replace("'", '"'))


def _timed(args, env, runs, other_env=None) -> tuple[list, list]:
    """Whole-process (wall, CPU) times of ``runs`` designs; with
    ``other_env``, each run of this checkout follows one of the other.  The
    CPU time (user + system of the process) is what the run costs where
    others share the machine: its wall time then waits for the cores."""
    times, other = [], []
    for _ in range(runs):
        for e, out in ((other_env, other), (env, times)):
            if e is None:
                continue
            c = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            subprocess.run([PAR, "design", *args, "--json"], check=True, capture_output=True, env=e)
            wall = time.perf_counter() - t
            d = resource.getrusage(resource.RUSAGE_CHILDREN)
            out.append((wall, d.ru_utime - c.ru_utime + d.ru_stime - c.ru_stime))
    return times, other


_FLOOR = r"""
import contextlib, io, json, sys, time
t0 = time.process_time()
from paretofl.cli import main
imported = time.process_time() - t0
out = []
for _ in range(3):
    t = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        main(["design", *json.loads(sys.argv[1]), "--json"])
    out.append(time.process_time() - t)
print(json.dumps([imported, out[0], min(out[1:])]))
"""


def floor(env, budgets, only) -> None:
    """``--floor``: CPU seconds of import, the first design and a repeated one, per scenario (module doc)."""
    print(f"  {'scenario':<38} {'import':>7} {'cold':>6} {'warm':>6} {'floor':>6} {'accountant':>10}  (CPU seconds)")
    for name, args in SCENARIOS.items():
        if only not in name:
            continue
        args = [str(budgets) if a == "BUDGETS" else a for a in args]
        r = subprocess.run([sys.executable, "-c", _FLOOR, json.dumps(args)], check=True, capture_output=True,
                           text=True, env=env)
        imp, cold, warm = json.loads(r.stdout.strip().splitlines()[-1])
        print(f"  {name:<38} {imp:7.2f} {cold:6.2f} {warm:6.2f} {imp + warm:6.2f} {cold - warm:10.2f}", flush=True)


def main():
    as_json = "--json" in sys.argv
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 5
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else ""
    before = sys.argv[sys.argv.index("--before") + 1] if "--before" in sys.argv else None
    res, heavy, res_before = {}, {}, {}
    env = dict(os.environ)
    if "--no-bytecode" not in sys.argv:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp()
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    other_env = None
    if before is not None:
        other_env = {**env, "PYTHONPATH": str(Path(before).resolve())}
    budgets = Path(tempfile.mkdtemp()) / "budgets.csv"
    budgets.write_text("share,epsilon\n0.6,1\n0.3,2\n0.1,8\n")
    if "--floor" in sys.argv:
        imported(["--clients", "10", "--budget", "2"], env)        # bytecode written, untimed
        return floor(env, budgets, only)
    for name, args in SCENARIOS.items():
        if only not in name:
            continue
        args = [str(budgets) if a == "BUDGETS" else a for a in args]
        heavy[name] = imported(args, env)
        if other_env is not None:
            imported(args, other_env)          # its bytecode written, untimed
        times, other = _timed(args, env, runs, other_env)
        res[name] = [statistics.median(x) for x in zip(*times)]
        if other:
            res_before[name] = [statistics.median(x) for x in zip(*other)]
        if not as_json:
            (w, c), was = res[name], ""
            if other:
                wb, cb = res_before[name]
                was = f"   before: wall {wb:6.2f} s, CPU {cb:6.2f} s ({cb / c:4.1f}x)"
            print(f"  {name:<38} wall {w:6.2f} s, CPU {c:6.2f} s{was}   imports: "
                  f"{', '.join(heavy[name]) or 'none of ' + '/'.join(HEAVY)}", flush=True)
    if as_json:
        print(json.dumps({"median_wall_cpu_seconds": res, "median_wall_cpu_seconds_before": res_before or None,
                          "heavy_imports": heavy, "bytecode": "--no-bytecode" not in sys.argv}))
        return
    torchy = sorted({m for v in heavy.values() for m in v} & {"torch", "flwr"})
    print(f"paretofl design, whole process, median of {runs} runs, bytecode "
          f"{'compiled on every start' if '--no-bytecode' in sys.argv else 'kept'}; imports torch or flwr: "
          f"{', '.join(torchy) if torchy else 'no'}")


if __name__ == "__main__":
    main()
