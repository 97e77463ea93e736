# Two entry points, both self-contained on a fresh machine:
#   make demo   -> set up, start a local tansu broker and kgw in front of it
#   make test   -> set up, run the whole test suite
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-fast bench clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,spark]'
	touch $(STAMP)

setup: $(STAMP)
	@command -v kcat >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then (apt-get update -qq && apt-get install -y -qq kcat) >/dev/null; \
	  else echo "kcat missing: sudo apt-get install kcat"; fi; }

demo: setup
	$(VENV)/bin/kgw demo

test: setup
	$(PY) -m pytest -q

test-fast: setup
	$(PY) -m pytest -q -m "not java and not spark"

clean:
	rm -rf $(VENV) build *.egg-info
