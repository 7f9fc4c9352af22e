# Two set-up commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test docs bench clean clean-cache

$(STAMP): pyproject.toml setup.py src/strata/entropy/_rans64.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[test,demo,io,zarr,torch,quality,bench,docs,gpu]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) demo/demo.py

test: $(STAMP)
	$(PY) -m ruff check src tests benchmarks demo
	$(MAKE) docs
	$(PY) -m pytest -q

# The documentation (docs/*.md) and the API reference from the docstrings, into build/docs;
# every warning is an error, and -E rebuilds from scratch so that none is skipped.
docs: $(STAMP)
	$(PY) -m sphinx -W --keep-going -E -q -b html docs build/docs

bench: $(STAMP)
	$(PY) benchmarks/lossy_vs_anchors.py

# numba's on-disk cache tracks each kernel's own file only: after editing a module whose
# inlined functions or constants other kernels use, drop the cache.
clean-cache:
	find src -name '*.nbi' -delete -o -name '*.nbc' -delete

clean: clean-cache
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .ruff_cache demo/out
