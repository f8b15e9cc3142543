# alpha_rl — `make train` and `make test` are the whole set-up: each creates .venv (and reinstalls
# it when pyproject.toml changes) before it runs. `make help` lists every target.
#
# NOVENV=1 uses the python3 on PATH as it is (no .venv, nothing installed): for machines whose
# environment is prepared another way, such as the offline GPU host (`source .gpukit/env.sh`).

PYTHON ?= python3
VENV   := .venv
ARCHS  ?= 90
EXPERIMENT ?= her_ablation
JOBS   ?= $(shell nproc 2>/dev/null || echo 2)
ARGS   ?=
EXTRAS ?= dev
STORE  ?= mlflow.db
PORT   ?= 5000
DB     ?= $(ALPHA_RL_TRACKING_DB)
HOST   ?= 127.0.0.1
ARTIFACTS ?= mlartifacts

ifeq ($(NOVENV),1)
  PY    := $(PYTHON)
  STAMP :=
else
  PY    := $(VENV)/bin/python
  STAMP := $(VENV)/.installed
endif

export MLFLOW_DISABLE_TELEMETRY := true
export PYTHONPATH := $(CURDIR)/src$(if $(PYTHONPATH),:$(PYTHONPATH))

.DEFAULT_GOAL := help
.PHONY: help train sweep kill-check study ui tracking-server bench gpu-ablation test test-fast test-gpu cubins docs readme lint clean venv

# the sweep presets, conf/experiment/*.yaml, as `make help` names them (a|b|c)
PRESETS := $(subst $() ,|,$(sort $(basename $(notdir $(wildcard conf/experiment/*.yaml)))))

help: ## list the targets
	@awk -v presets='$(PRESETS)' 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {n++; name[n] = $$1; \
	  doc[n] = $$2; if (length($$1) > w) w = length($$1)} END {for (i = 1; i <= n; i++) \
	  {gsub(/<presets>/, presets, doc[i]); printf("  make %-" w "s  %s\n", name[i], doc[i])}}' \
	  $(MAKEFILE_LIST)
	@echo "  variables: ARCHS=\"$(ARCHS)\" (cubin arches), ARGS=\"...\" (Hydra overrides for train), NOVENV=1"

$(VENV)/.installed: pyproject.toml
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	@echo "installing alpha_rl[$(EXTRAS)] into $(VENV) ..."
	@if $(VENV)/bin/python -m pip install -q --disable-pip-version-check uv 2>/dev/null; then \
	  $(VENV)/bin/uv pip install -q --python $(VENV)/bin/python -e '.[$(EXTRAS)]'; \
	else \
	  echo "uv is not installable here; using pip (slower)"; \
	  $(VENV)/bin/python -m pip install -q --disable-pip-version-check -e '.[$(EXTRAS)]'; \
	fi
	@touch $@

venv: $(STAMP) ## create or refresh .venv only

train: $(STAMP) ## run the default experiment (Hydra overrides in ARGS="...")
	$(PY) -m alpha_rl.train $(ARGS)

sweep: $(STAMP) ## run a sweep preset of conf/experiment/ under multirun/ (EXPERIMENT=<presets>)
	$(PY) -m alpha_rl.train -m experiment=$(EXPERIMENT) $(ARGS)

kill-check: $(STAMP) ## keep/kill verdict per treatment of a sweep's variant in MLflow (ARGS="--sweep multirun/<date>/<time> [--axis her|beta|alpha|reward|agent|<key>]")
	$(PY) -m alpha_rl.killcheck $(ARGS)

study: $(STAMP) ## a sweep preset in stages of seeds until each treatment is KILLED, KEPT or max seeds (EXPERIMENT=<preset>; ARGS="study.max_seeds=20 ..." or ARGS="--resume outputs/study/<dir>")
	$(PY) -m alpha_rl.study.cli $(if $(findstring --resume,$(ARGS)),,$(EXPERIMENT)) $(ARGS)

ui: $(STAMP) ## MLflow UI + tracking server on 127.0.0.1 over a store (STORE=mlflow.db PORT=5000); prints its links once it answers
	@test -f "$(STORE)" || { echo "no tracking store at $(STORE): run \`make train\` first or pass STORE=<file.db>"; exit 2; }
	@$(PY) -m alpha_rl.tracking server --db sqlite:///$(abspath $(STORE)) --artifacts $(dir $(abspath $(STORE)))mlartifacts --host 127.0.0.1 --port $(PORT) --log $(dir $(abspath $(STORE)))mlflow_server.log

dashboard: $(STAMP) ## optuna-dashboard on 127.0.0.1 over a search's studies (STUDIES=optuna.journal, or the search.storage tag's URL; PORT=8080)
	@$(PY) -m alpha_rl.search.dashboard "$(or $(STUDIES),optuna.journal)" --port $(if $(filter command line environment,$(origin PORT)),$(PORT),8080)

tracking-server: $(STAMP) ## tracking server for a cluster's jobs (DB=postgresql://user@dbhost/mlflow HOST PORT ARTIFACTS; beyond loopback ARGS="--auth --credentials FILE")
	$(PY) -m alpha_rl.tracking server --db "$(DB)" --artifacts "$(ARTIFACTS)" --host $(HOST) --port $(PORT) $(ARGS)

slurm-up: $(STAMP) ## a throw-away SLURM cluster on this host, as the tests start one (as root; DIR=/tmp/alpha_rl_slurm): then export SLURM_CONF=$(DIR)/slurm.conf
	$(PY) -m tests.slurm_cluster up $(or $(DIR),/tmp/alpha_rl_slurm)

slurm-down: $(STAMP) ## stop the cluster of slurm-up (DIR=/tmp/alpha_rl_slurm), every process of it
	$(PY) -m tests.slurm_cluster down $(or $(DIR),/tmp/alpha_rl_slurm)

bench: $(STAMP) ## GPU: the full step (eager, graph, per kernel), its peers (torch eager/graph/compile, JAX), GEMMs, learner, replay
	$(PY) -m benchmarks.peers.run --envs 4096 65536
	$(PY) benchmarks/gemm_shapes.py
	$(PY) benchmarks/learner_update.py
	$(PY) benchmarks/replay_cycle.py --breakdown

gpu-ablation: $(STAMP) ## GPU: EXPERIMENT (her_ablation; her_components) x 5 seeds x 40k steps at scale=gpu, then the kill check
	@dir=multirun/gpu_ablation/$$(date +%Y-%m-%d_%H-%M-%S); set -e; \
	$(PY) -m alpha_rl.train -m experiment=$(EXPERIMENT) backend=cuda scale=gpu 'seed=0,1,2,3,4' steps=40000 audit.every=4000 hydra.sweep.dir=$$dir $(ARGS); \
	$(PY) -m alpha_rl.killcheck --sweep $$dir

# The test targets keep compiled bytecode under build/pycache even where PYTHONDONTWRITEBYTECODE
# is set: without it every process a test starts (runs, sweeps, servers, xdist workers) compiles
# MLflow, Hydra and SQLAlchemy again, seconds each. --dist loadgroup hands out one test at a time
# (the slow ones first) and keeps the tests that share one costly build on one worker
# (tests/conftest.py).
TEST_JOBS ?= auto
PYTEST := PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(CURDIR)/build/pycache \
	$(PY) -m pytest -q -n $(TEST_JOBS) --dist loadgroup
test: $(STAMP) ## every test that needs no GPU, on every core (TEST_JOBS=1: one process); what CI runs
	$(PYTEST) -m "not gpu" $(ARGS)

test-fast: $(STAMP) ## the inner loop, minutes: test without the slow ones (sweeps, servers, browser, long runs)
	$(PYTEST) -m "not gpu and not slow and not browser" $(ARGS)

test-gpu: $(STAMP) ## run the GPU tests (needs a CUDA GPU, pycuda and `make cubins`)
	$(PY) -m pytest -m gpu -q $(ARGS)

cubins: $(STAMP) ## compile cuda/*.cu into build/cubins/sm_<arch>/ (incremental; ARCHS="90 100")
	$(PY) -m alpha_rl.build.cli $(foreach a,$(ARCHS),--arch $(a)) --jobs $(JOBS)

docs: $(STAMP) ## the documentation site into site/ (strict: a broken link fails), the configuration reference regenerated first
	$(PY) -m alpha_rl.docsite.config_reference
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict
	@echo "the site: $(CURDIR)/site/index.html"

readme: $(STAMP) ## run the default configuration and write README's "What you should see" (lines, time, image) from it
	$(PY) -m alpha_rl.docsite.readme

lint: $(STAMP) ## ruff check and format check
	$(PY) -m ruff check src tests benchmarks
	$(PY) -m ruff format --check src tests benchmarks

clean: ## remove built cubins and caches (keeps .venv and tracking data)
	rm -rf build site .pytest_cache .ruff_cache
	find src tests -name __pycache__ -type d -prune -exec rm -rf {} +
