# kamera: `make help` lists the targets.
#   SCALE=tiny  (default) tiny models + in-memory benchmarks, minutes on a CPU
#   SCALE=paper the paper's checkpoints and benchmarks from KAMERA_MODELS / KAMERA_DATA
#   LAUNCHER=local (default, in-process) | submitit_local | slurm (one Slurm array per sweep)
PYTHON ?= python
SCALE ?= tiny
LAUNCHER ?= local
.DEFAULT_GOAL := help

suffix := $(if $(filter paper,$(SCALE)),,_tiny)
launch := launcher=$(if $(filter slurm,$(LAUNCHER)),slurm_h100,$(LAUNCHER))

# sweep(experiment): preflight every job (fails fast, naming missing checkpoints / data), then run the
# multirun; each job skips items already in its results shard, so reruns only do missing work.
define sweep
	$(PYTHON) -m kamera.sweep --check experiment=$(1) $(ARGS)
	$(PYTHON) -m kamera.run -m experiment=$(1) $(launch) $(ARGS)
endef

.PHONY: help test test-slow lint bench table3 fig5 demo manifest sync rehearse

help: ## list the targets
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 12

test: lint ## run the test suite (CPU, a few minutes) and ruff; excludes the slow toy retrains
	$(PYTHON) -m pytest -m "not slow"

test-slow: ## retrain the toy binding models from their committed configs and check the gates (~7 + 17 min)
	$(PYTHON) -m pytest -m slow

lint: ## ruff over the package, experiments, scripts and tests
	$(PYTHON) -m ruff check kamera experiments scripts tests

table3: ## Table 3: sweep (SCALE, LAUNCHER, ARGS=extra overrides), then results/tables/table3*.{md,tex}
	$(call sweep,table3$(suffix))
	$(PYTHON) experiments/table3.py --group table3$(suffix)

fig5: ## Figure 5: rank sweep, then figures/fig5*.{pdf,png}
	$(call sweep,fig5$(suffix))
	$(PYTHON) experiments/fig5.py --group fig5$(suffix)

demo: ## Table 3 and Figure 5 at tiny scale on this machine (CPU), end to end
	$(MAKE) table3 fig5 SCALE=tiny LAUNCHER=local
	@echo "demo outputs: results/tables/table3_tiny.md results/tables/table3_tiny.tex figures/fig5_tiny.pdf figures/fig5_tiny.png"

manifest: ## one override line per job of EXP (for SLURM/array.sbatch): make manifest EXP=table3
	@mkdir -p SLURM/manifests
	$(PYTHON) -m kamera.sweep --manifest experiment=$(EXP) $(ARGS) > SLURM/manifests/$(EXP).txt
	@echo "SLURM/manifests/$(EXP).txt: $$(wc -l < SLURM/manifests/$(EXP).txt) jobs; submit with:"
	@echo "  sbatch --array=0-$$(( $$(wc -l < SLURM/manifests/$(EXP).txt) - 1 ))%8 SLURM/array.sbatch SLURM/manifests/$(EXP).txt"

sync: ## upload offline wandb runs (run on a node with internet)
	wandb sync --skip-synced $$(find $${KAMERA_OUTPUTS:-outputs} -type d -name 'offline-run-*')

bench: ## time B's prefill vs relocate + patch on a mid-size random model (prints a table)
	$(PYTHON) scripts/bench_reuse.py

# rehearse: every paper experiment at n_items=1 on shaped checkpoints (real configs, random 2-layer weights)
# and fixture data, on this machine's CPU. Real tokenizers from KAMERA_TOKENIZERS (qwen2/, llama2/) when set.
REHEARSE_DIR ?= outputs/rehearse
REHEARSE ?=
rehearse: ## every paper experiment end to end on shaped checkpoints + fixtures (CPU; REHEARSE=table3,fig5 to pick; prints H100-hour estimates)
	$(PYTHON) -m kamera.shaped.rehearse --out $(REHEARSE_DIR) $(if $(REHEARSE),--experiments $(REHEARSE))
