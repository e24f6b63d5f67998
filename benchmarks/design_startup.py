"""Whole-process time of `paretofl design` (median of 5 runs per scenario),
and a check that it never imports torch.

    make bench            # or: .venv/bin/python benchmarks/design_startup.py [--json]
"""

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PAR = str(Path(sys.executable).with_name("paretofl"))
SCENARIOS = {
    "N=100, q searched (demo)": ["--clients", "100", "--budget", "2", "--max-rounds", "500"],
    "N=100, q=0.1 fixed": ["--clients", "100", "--budget", "2", "--max-rounds", "500", "--q", "0.1"],
    "N=10, q searched": ["--clients", "10", "--budget", "2", "--max-rounds", "200"],
    "N=1000, q=0.05 fixed, eps=1": ["--clients", "1000", "--budget", "1", "--max-rounds", "2000", "--q", "0.05"],
    "N=1000, q searched, eps=1": ["--clients", "1000", "--budget", "1", "--max-rounds", "2000"],
    "N=100, budgets 1/2/8 (3 groups)": ["--clients", "100", "--budgets", "BUDGETS", "--max-rounds", "200"],
    "N=10^4, bandmf, cohort <= 100": ["--clients", "10000", "--budget", "2", "--max-rounds", "1000",
                                      "--q-max", "0.01", "--mechanism", "bandmf"],
    "N=10^4, auto, cohort <= 100": ["--clients", "10000", "--budget", "2", "--max-rounds", "1000",
                                    "--q-max", "0.01", "--mechanism", "auto"],
}


def main():
    as_json = "--json" in sys.argv
    res = {}
    budgets = Path(tempfile.mkdtemp()) / "budgets.csv"
    budgets.write_text("share,epsilon\n0.6,1\n0.3,2\n0.1,8\n")
    for name, args in SCENARIOS.items():
        args = [str(budgets) if a == "BUDGETS" else a for a in args]
        times = []
        for _ in range(5):
            t = time.perf_counter()
            subprocess.run([PAR, "design", *args, "--json"], check=True, capture_output=True)
            times.append(time.perf_counter() - t)
        res[name] = statistics.median(times)
    code = ("import sys; from paretofl.cli import main; main(['design','--clients','100','--budget','2',"
            "'--max-rounds','500','--json']); sys.exit(3 if 'torch' in sys.modules else 0)")
    torch_free = subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0
    if as_json:
        print(json.dumps({"median_seconds": res, "imports_torch": not torch_free}))
        return
    print("paretofl design, whole process, median of 5 runs:")
    for name, t in res.items():
        print(f"  {name:<32} {t:6.2f} s")
    print(f"imports torch: {'no' if torch_free else 'YES'}")


if __name__ == "__main__":
    main()
