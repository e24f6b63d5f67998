# paretofl — the commands of the README.  Everything runs inside .venv,
# installed from constraints.txt (the exact versions; pyproject.toml has lower bounds).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
OUT    := out

.PHONY: setup demo test test-slow lint bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@echo "setting up $(VENV) (first time only: about 2 minutes; pip's output goes to $(VENV)/install.log)"
	@$(PYTHON) -m venv $(VENV)
	@($(BIN)/pip install --upgrade pip && $(BIN)/pip install -c constraints.txt -e '.[dev]') > $(VENV)/install.log 2>&1 \
	  || (tail -20 $(VENV)/install.log; echo "setup failed: the whole log is $(VENV)/install.log"; exit 1)
	@echo "installed paretofl and its dependencies into $(VENV)"
	@# FashionMNIST from Debian's package when we can (root + apt); otherwise torchvision later
	@if [ ! -d /usr/share/datasets/fashion-mnist ] && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  (timeout 300 apt-get update -qq && timeout 300 apt-get install -y -qq dataset-fashion-mnist) >/dev/null 2>&1 \
	  && echo "installed FashionMNIST into /usr/share/datasets/fashion-mnist" \
	  || echo "note: dataset-fashion-mnist not installed; FashionMNIST will come from torchvision"; fi
	@touch $(STAMP)

# The main job end to end: a small pre-trial on the public 10 % of FashionMNIST, the fit of kappa,
# the recommendation for 100 clients at epsilon 2 (delta 1e-5, at most 500 rounds) saved to out/design.json, the
# figures.
demo: setup
	@mkdir -p $(OUT)
	@echo "== 1/4 pre-trial: LR on the public 10 % of FashionMNIST, and its local work (about two minutes on 2 quiet cores)"
	@$(BIN)/paretofl pretrial pretrials/demo.toml --out $(OUT)/demo.sqlite
	@echo "== 2/4 fit kappa"
	@$(BIN)/paretofl fit $(OUT)/demo.sqlite --out $(OUT)/demo_fit.json
	@echo "== 3/4 figures"
	@$(BIN)/paretofl plot $(OUT)/demo.sqlite --fit $(OUT)/demo_fit.json --out-dir $(OUT)
	@echo "== 4/4 the recommendation for 100 clients at epsilon 2 (delta 1e-5, at most 500 rounds)"
	@$(BIN)/paretofl design --clients 100 --budget 2 --delta 1e-5 --max-rounds 500 \
	  --fit $(OUT)/demo_fit.json --plot $(OUT)/design.png --out $(OUT)/design.json
	@echo "== why its T, sigma and local epochs may differ from the README's: this kappa and local work are the demo's own,"
	@echo "   fitted to its small pre-trial ($(OUT)/demo_fit.json: 6 sigma x 6 T x 3 seeds); the README's uses the shipped fit"
	@echo "   (paretofl/data/lr_fmnist_fit.json: the same LR on 8 x 8 x 5 seeds), what paretofl design uses without --fit."
	@echo "   Which to use: for LR on FashionMNIST, the shipped fit (more seeds, a finer grid); for your own model,"
	@echo "   a pre-trial of your own, as this demo shows. The demo's design is saved in $(OUT)/design.json."
	@echo "== done: the recommendation is just above; figures in $(OUT)/ ($$(cd $(OUT) && ls *.png | xargs))"

lint: setup
	$(BIN)/ruff check paretofl tests benchmarks analysis examples

test: setup lint
	$(BIN)/python -m pytest -q

test-slow: setup
	$(BIN)/python -m pytest -q -m slow

bench: setup
	$(BIN)/python benchmarks/design_startup.py
	$(BIN)/python benchmarks/engine_vs_opacus.py
	$(BIN)/python benchmarks/engine_scaling.py
	$(BIN)/python benchmarks/engine_profile.py
	$(BIN)/python benchmarks/pretrial_batched_vs_one_at_a_time.py
	$(BIN)/python benchmarks/generic_model.py
	$(BIN)/python benchmarks/cohort_scaling.py
	$(BIN)/python benchmarks/bandmf_round_cost.py

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache .hypothesis build dist
