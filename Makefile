# paretofl — the commands of the README.  Everything runs inside .venv.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
OUT    := out

.PHONY: setup demo test test-slow bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@# FashionMNIST from Debian's package when we can (root + apt); otherwise torchvision later
	@if [ ! -d /usr/share/datasets/fashion-mnist ] && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  (timeout 300 apt-get update -qq && timeout 300 apt-get install -y -qq dataset-fashion-mnist) >/dev/null 2>&1 \
	  && echo "installed FashionMNIST into /usr/share/datasets/fashion-mnist" \
	  || echo "note: dataset-fashion-mnist not installed; FashionMNIST will come from torchvision"; fi
	touch $(STAMP)

# The main job on a worked scenario: 100 clients, epsilon 2, delta 1e-5, at most 500 rounds.
demo: setup
	@mkdir -p $(OUT)
	$(BIN)/paretofl design --clients 100 --budget 2 --delta 1e-5 --max-rounds 500 --plot $(OUT)/design.png
	$(BIN)/paretofl pareto --clients 100 --q 0.1 --kappa 0.05 --sigma-min 0.5 --sigma-max 5 \
	  --max-rounds 300 --plot $(OUT)/pareto_front.png

test: setup
	$(BIN)/python -m pytest -q

test-slow: setup
	$(BIN)/python -m pytest -q -m slow

bench: setup
	$(BIN)/python benchmarks/design_startup.py
	$(BIN)/python benchmarks/engine_vs_opacus.py

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache .hypothesis
