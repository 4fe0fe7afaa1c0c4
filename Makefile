# cadence — every command a developer or CI needs. `make help` lists them.
.DEFAULT_GOAL := help
SHELL := /bin/bash

VENV ?= .venv
PY := $(VENV)/bin/python
MEMBERS := packages/core packages/mlflow packages/detection $(patsubst %/,%,$(sort $(wildcard packages/methods/*/))) $(wildcard harness)
STAMP := $(VENV)/.installed

.PHONY: help install install-detection test lint typecheck fmt demo bench cards wheels new-method clean

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-17s %s\n", $$1, $$2}'

# Reinstalls only when a pyproject.toml changed; otherwise it is a no-op.
$(STAMP): pyproject.toml $(addsuffix /pyproject.toml,$(MEMBERS))
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(addprefix -e ,$(addsuffix [all],packages/core) $(filter-out packages/core,$(MEMBERS))) --group dev
	@touch $@

install: $(STAMP) ## create .venv and install every package of the repo (editable) plus dev tools

# MMDetection (route (b) of issue 30: mmcv-lite with torchvision's nms) pins versions the main environment should
# not take, so it goes into its own environment that sees .venv's packages (site.addsitedir runs their .pth files).
DETECTION_VENV ?= .venv-detection
install-detection: $(STAMP) ## MMDetection's YOLOX for cadence-detection, in .venv-detection over .venv's packages
	@test -x $(DETECTION_VENV)/bin/python || python3 -m venv $(DETECTION_VENV)
	$(DETECTION_VENV)/bin/python -c "import site, sys; open(site.getsitepackages()[0] + '/zz_cadence_venv.pth', 'w').write('import site; site.addsitedir(%r)\n' % sys.argv[1])" "$$($(PY) -c 'import site; print(site.getsitepackages()[0])')"
	$(DETECTION_VENV)/bin/python -m pip install --quiet -e './packages/detection[mmdet]'
	@echo "make install-detection: use $(DETECTION_VENV)/bin/python (e.g. $(DETECTION_VENV)/bin/python -m cadence_harness run detection_shapes --model mmdet/yolox_tiny)"

wheels: $(STAMP) ## build a wheel of every package into dist/ (then: pip install --find-links dist cadence-mixup)
	rm -rf dist && $(PY) -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir dist $(addprefix ./,$(MEMBERS))
	@ls dist | wc -l | xargs printf 'make wheels: %s wheels in dist/\n'

# pytest exits 5 when it collected nothing: an empty run must not pass. TEST_WORKERS=0 runs in this process.
# Each worker takes cores / workers OpenMP threads (conftest.py), unless OMP_NUM_THREADS is set.
TEST_WORKERS ?= auto
test: $(STAMP) ## run the test suite on CPU, one pytest worker per core (CI runs it, then make typecheck)
	@$(PY) -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; exit $$rc

lint: $(STAMP) ## ruff: lint and format check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP) ## mypy over the packages [tool.mypy] names in pyproject.toml (CI runs it after the tests)
	$(PY) -m mypy

fmt: $(STAMP) ## ruff: fix lint and format in place
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

demo: $(STAMP) ## the main job: a small CPU comparison of methods on real data
	$(PY) -m cadence_harness demo

bench: $(STAMP) ## benchmarks: start-up, trainer overhead, harness host time, Python calls, phases and operations per step, a process's first run against its later ones, loaders, augmentation, surgery, compiled step, FSDP2 memory per rank; side by side, with targets
	$(PY) -m cadence_harness.benchmarks

cards: $(STAMP) ## write studies' measured results into the method cards and method_cards/INDEX.md (make cards STUDY="<recipe> ...")
	@test -n "$(STUDY)" || { echo "make cards: name the study whose records write the cards, e.g. make cards STUDY=cifar10_resnet20 (its runs are in method_cards/runs)" >&2; exit 2; }
	$(PY) -m cadence_harness report $(foreach s,$(STUDY),--study $(s)) --cards $(REPORT_ARGS)

new-method: ## scaffold packages/methods/$(NAME) (e.g. make new-method NAME=stochastic_depth); see packages/methods/README.md
	@test -n "$(NAME)" || { echo "make new-method: give the method's folder name, e.g. make new-method NAME=stochastic_depth" >&2; exit 2; }
	python3 packages/methods/new_method.py $(NAME)

clean: ## remove the virtual environments and caches
	rm -rf $(VENV) $(DETECTION_VENV) .pytest_cache .ruff_cache .mypy_cache
