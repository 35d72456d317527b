# Two commands set everything up on a fresh machine with Python >= 3.10:
#   make demo   creates .venv, installs xdex, runs the demo on the bundled dataset
#   make test   creates .venv with the test extras, lints and type-checks src/ (ruff, mypy), runs the test suite
#   make lint   only the lint (src, tests) and type checks (configured in pyproject.toml)
#   make wheel  builds dist/xdex-*.whl (recipes and the bundled dataset inside); `pip install` it anywhere
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# A local wheel folder (if the machine has one) lets pip find the CPU build of torch offline.
PIP_FLAGS ?= $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)

.PHONY: demo test lint install wheel clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet $(PIP_FLAGS) -e ".[test]"
	touch $@

install: $(VENV)/.installed

demo: install
	$(BIN)/xdex demo

lint: install
	$(BIN)/ruff check src tests
	$(BIN)/mypy

test: install lint
	$(BIN)/python -m pytest -q

wheel: install
	$(BIN)/python -m build --wheel --no-isolation --outdir dist

clean:
	rm -rf $(VENV) build dist src/*.egg-info
