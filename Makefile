# Devicedeck: `make run` for the demo, `make test` for everything.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY_STAMP := $(VENV)/.installed
JS_STAMP := node_modules/.installed

.PHONY: run serve test lint typecheck pytest protos assets clean

$(PY_STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $@

$(JS_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

assets: $(JS_STAMP)
	$(BIN)/python -m app.ui.assets

run: $(PY_STAMP) assets
	$(BIN)/devicedeck demo

serve: $(PY_STAMP) assets
	DEVICEDECK_AUTH=off $(BIN)/devicedeck serve

lint: $(PY_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(PY_STAMP)
	$(BIN)/mypy

pytest: $(PY_STAMP) assets
	DEVICEDECK_REQUIRE_POSTGRES=1 $(BIN)/pytest -p no:cacheprovider

test: lint typecheck pytest

protos: $(PY_STAMP)
	$(BIN)/python -m app.kubelet.generate

clean:
	rm -rf $(VENV) node_modules static/vendor
