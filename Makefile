# Two commands: `make run` starts the studio on the bundled model, `make test` runs the tests
# (`make test-fast`: the same without the tests marked slow or browser, a few minutes).
# Both create .venv and install what is missing; a second run installs nothing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
# A pinned torch build is installed first so that requirements.txt's range is already met.
# GPU users: TORCH_SPEC="torch==2.13.0" with the CUDA index, see README.
TORCH_SPEC ?= torch==2.13.0
CHROMIUM ?= /usr/bin/chromium

.PHONY: run test test-fast lint deps dev-deps browser clean docs gpu-kit

$(PY):
	$(PYTHON) -m venv $(VENV)

$(VENV)/.deps: requirements.txt | $(PY)
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install "$(TORCH_SPEC)"
	$(PIP) install -r requirements.txt
	touch $@

# Optional accelerators (token merging, int8 quantization); without them those techniques show as unavailable.
$(VENV)/.extras: requirements-extras.txt $(VENV)/.deps
	$(PIP) install -r requirements-extras.txt
	touch $@

$(VENV)/.dev-deps: requirements-dev.txt $(VENV)/.extras
	$(PIP) install -r requirements-dev.txt
	touch $@

deps: $(VENV)/.deps
dev-deps: $(VENV)/.dev-deps

# Debian's chromium for the real-browser tests (Playwright's own download cannot work offline).
browser:
	@test -x $(CHROMIUM) || { (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || \
	  echo "chromium could not be installed; browser tests will be skipped"; }

run: $(VENV)/.extras
	HF_HUB_OFFLINE=$${HF_HUB_OFFLINE:-1} $(PY) app.py

# Two pytest-xdist workers, a test file each at a time (its module fixtures built once), one torch thread each
# (tests/conftest.py): on a two-core machine much of a test's time is spent waiting on servers, browsers and
# subprocesses, which the other worker fills. The files go out longest first (tests/conftest.py orders them).
# TEST_WORKERS=0 runs the suite in this process.
TEST_WORKERS ?= 2
WORKERS = -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
PYTEST = HF_HUB_OFFLINE=1 $(PY) -m pytest -q $(if $(filter 0,$(TEST_WORKERS)),,$(WORKERS))

# The project's bytecode, written once: where PYTHONDONTWRITEBYTECODE is set, each of the ~120 Python processes
# the suite starts (servers, fresh processes) would otherwise compile the studio's sources again.
BYTECODE = $(PY) -m compileall -q -j 0 studio pipelines benchmarks tests app.py >/dev/null

test: $(VENV)/.dev-deps browser
	$(BYTECODE)
	$(PYTEST) $(PYTEST_ARGS)

test-fast: $(VENV)/.dev-deps
	$(BYTECODE)
	$(PYTEST) -m "not slow and not browser"

# The README's techniques table, from the registry, and docs/benchmarks.md's "What is fastest where" table, from
# the cards in docs/cards/ (tests fail while either is stale).
docs: $(VENV)/.deps
	$(PY) -m studio.optimizations.table README.md
	$(PY) -m studio.cards.doc_table

# The wheels an offline GPU machine lacks (benchmarks/gpu/kit.txt), for Python 3.12 on x86-64 Linux, into .gpu-kit/:
# downloaded with `pip download --no-deps --only-binary=:all: --python-version 3.12 --platform ...`, an xformers
# wheel only if one was built for the machine's torch, then installed offline and imported; prints the size.
# Then on the machine: bash benchmarks/gpu/run.sh (docs/gpu.md).
gpu-kit: $(VENV)/.deps
	$(PY) -m benchmarks.gpu.kit_build --kit .gpu-kit

lint: $(VENV)/.dev-deps
	$(PY) -m ruff check .

clean:
	rm -rf $(VENV) studio-data test-artifacts
