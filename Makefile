# Developer entry points. `make test` is what CI runs (.ci/run).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# Marks the last `pip install`; reinstall only when pyproject.toml is newer.
STAMP  := $(VENV)/.installed
CONFIG ?= cluster.toml

.PHONY: help venv up down status test lint clean cpu-per-put console-assets console-screenshots sim-explore

help:
	@echo "make up      create .venv if needed and start a local 3-node cluster"
	@echo "make status  show the cluster's nodes, roles and indexes"
	@echo "make down    stop the cluster (data is kept)"
	@echo "make test    run the test suite"
	@echo "make lint    ruff"
	@echo "make cpu-per-put  leader/follower CPU, fsyncs, entries, syscalls per put at x1, x64"
	@echo "make console-assets  rebuild console/static/htmx.min.js from console/assets (npm ci)"
	@echo "make console-screenshots  the console's browser tests, writing docs/console/*.png"
	@echo "make sim-explore  the long simulation run (SIM_MINUTES=120): seeds until one fails, shrunk"
	@echo "make clean   stop the cluster, remove data/ and $(CONFIG)"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -e '.[test]'
	@$(BIN)/python -m pip install -e '.[powerloss]' >/dev/null 2>&1 || \
		echo "note: pyfuse3 could not be built (it needs Debian fuse3 libfuse3-dev pkg-config); the power-loss tests will be skipped"
	touch $@

venv: $(STAMP)

up: $(STAMP)
	$(BIN)/statekeeper cluster up --config $(CONFIG)

down: $(STAMP)
	$(BIN)/statekeeper cluster down --config $(CONFIG)

status: $(STAMP)
	$(BIN)/statekeeper cluster status --config $(CONFIG)

# --durations: the log names the slowest tests (the budget is ~12 minutes).
# Three workers: the tests wait more than they compute (two workers kept 2 cores 114% busy:
# 15:05 wall; three, 141%: 13:31, both beside a simulation using one core, 2026-12-07);
# tests sharing iptables link addresses share a worker (loadgroup).
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 3 --dist loadgroup --durations=15

lint: $(STAMP)
	$(BIN)/ruff check .

# The write path's before/after check (benchmarks/README.md): a minute or two.
cpu-per-put: $(STAMP)
	$(BIN)/python -m statekeeper.benchmarks.cpu_per_op --quick --no-chart

# The deterministic simulator's long exploration (docs/simulation.md); `make test` runs a
# one-minute one (tests/integration/test_sim.py).
SIM_MINUTES ?= 120
sim-explore: $(STAMP)
	$(BIN)/statekeeper sim explore --minutes $(SIM_MINUTES) --first-seed $${SIM_FIRST_SEED:-1} --keep-going --json sim-explore.json

# The web console's vendored htmx: the version pinned in console/assets/package-lock.json,
# installed by npm and copied next to the console's other static files. The built file is
# committed, so a node never needs npm; run this after changing the pinned version.
console-screenshots: $(STAMP)
	STATEKEEPER_SCREENSHOTS=$(CURDIR)/docs/console $(BIN)/python -m pytest -q tests/integration -k console

console-assets:
	cd console/assets && npm ci --ignore-scripts --no-audit --no-fund
	cp console/assets/node_modules/htmx.org/dist/htmx.min.js console/static/htmx.min.js

clean:
	@if [ -f $(CONFIG) ] && [ -x $(BIN)/statekeeper ]; then \
		$(BIN)/statekeeper cluster down --config $(CONFIG); \
	fi
	rm -rf data $(CONFIG)
