# Set-up and entry points. Needs only python3 (3.11+) and make.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed

.PHONY: install reproduce reproduce-quick test lint format bench clean browser

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -c constraints.txt torch==2.13.0
	$(PIP) install --quiet -c constraints.txt -e ".[dev,distributed]"
	touch $(STAMP)

# Every output into out/: the simulator's gallery, the verification table and its browsable
# report out/verify.html (quick checks; run
# `python -m verify` for the full-size ones) and the figures. reproduce-quick: preview figures.
# The checks and the full-size figures run on WORKERS local Dask processes of one thread each
# (the cores of the 2-core reference machine; `make reproduce WORKERS=8` on a larger one).
WORKERS ?= 2

reproduce: $(STAMP)
	$(PY) -m sde_sim simulate-all --out out/sde_sim --force
	$(PY) -m verify --quick --workers $(WORKERS) --json out/verify.json --table out/verify.txt \
		--html out/verify.html --force
	$(PY) -m figures --workers $(WORKERS) --out out --force

reproduce-quick: $(STAMP)
	$(PY) -m sde_sim simulate-all --out out/sde_sim --force
	$(PY) -m verify --quick --json out/verify.json --table out/verify.txt \
		--html out/verify.html --force
	$(PY) -m figures --quick --out out --force

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: lint browser
	HYPOTHESIS_PROFILE=ci $(PY) -m pytest -m "not gpu and not slow" -q

# The HTML report's browser test needs chromium (Debian's package): installed where apt-get
# runs as root; elsewhere the test skips, with its reason. Never fails.
browser:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then \
		:; \
	elif [ "$$(id -u 2>/dev/null)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing chromium for the HTML report's browser test (apt-get)"; \
		(apt-get install -y -qq chromium >/dev/null 2>&1 || \
		 (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1)) || \
		echo "could not install chromium: the HTML report's browser test will be skipped"; \
	else \
		echo "no chromium and no apt-get as root: the HTML report's browser test will be skipped"; \
	fi

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: $(STAMP)
	$(PIP) install --quiet -c constraints.txt -e ".[dev,bench]"
	$(PY) benchmarks/bench_sde.py
	$(PY) benchmarks/bench_kalman.py
	$(PY) benchmarks/bench_attention.py
	$(PY) benchmarks/bench_oscillator.py

clean:
	rm -rf $(VENV) out .pytest_cache .ruff_cache .hypothesis
