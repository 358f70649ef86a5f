# kamera: `make help` lists the targets.
PYTHON ?= python
.DEFAULT_GOAL := help

.PHONY: help test lint bench

help: ## list the targets
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 14

test: lint ## run the test suite (CPU, minutes) and ruff
	$(PYTHON) -m pytest

lint: ## ruff over the package, experiments, scripts and tests
	$(PYTHON) -m ruff check kamera tests

bench: ## time B's prefill vs relocate + patch on a mid-size random model (prints a table)
	$(PYTHON) scripts/bench_reuse.py
