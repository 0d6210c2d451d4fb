# Devicedeck: `make run` for the demo, `make test` for everything.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip install --quiet --disable-pip-version-check
# Where `make run` and `make serve` listen: `make run PORT=8080 HOST=0.0.0.0`.
HOST ?= 127.0.0.1
PORT ?= 8000
# The service and its runtime dependencies only; enough for `make run`.
RUNTIME_STAMP := $(VENV)/.runtime
# Also the test, lint and lock tools, for `make test`.
PY_STAMP := $(VENV)/.installed
JS_STAMP := node_modules/.installed
UV_COMPILE := $(BIN)/uv pip compile --quiet --generate-hashes --universal --python-version 3.11 \
	--custom-compile-command "make lock"

.PHONY: run serve test lint typecheck pytest protos assets rules lock clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed")'
	$(PYTHON) -m venv $(VENV)

# Every package comes from the lock files, hash-checked; the project itself is an editable
# install built with the locked setuptools.
$(RUNTIME_STAMP): requirements/build.txt requirements/runtime.txt pyproject.toml setup.py | $(BIN)/python
	$(PIP) --require-hashes -r requirements/build.txt -r requirements/runtime.txt
	$(PIP) --no-deps --no-build-isolation -e .
	touch $@

$(PY_STAMP): requirements/dev.txt $(RUNTIME_STAMP)
	$(PIP) --require-hashes -r requirements/dev.txt
	touch $@

# npm ci puts the tarballs package-lock.json pins, integrity-checked, in npm's cache, where the
# test of the committed static/vendor/ files reads them.
$(JS_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

run: $(RUNTIME_STAMP)
	$(BIN)/devicedeck demo --host $(HOST) --port $(PORT)

serve: $(RUNTIME_STAMP)
	DEVICEDECK_AUTH=off $(BIN)/devicedeck serve --host $(HOST) --port $(PORT)

lint: $(PY_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(PY_STAMP)
	$(BIN)/mypy

# Three test processes (pytest-xdist), a file each at a time: most of the suite waits on the real
# processes it starts, so three keep two cores busy; module fixtures (one demo run) stay in one.
pytest: $(PY_STAMP) $(JS_STAMP)
	DEVICEDECK_REQUIRE_POSTGRES=1 $(BIN)/pytest -p no:cacheprovider -n 3 --dist loadfile

test: lint typecheck pytest

protos: $(PY_STAMP)
	$(BIN)/python -m devicedeck.kubelet.generate

# Rewrites static/vendor/ from the npm packages package-lock.json pins (after a change there).
assets: $(RUNTIME_STAMP)
	$(BIN)/python -m devicedeck.ui.assets

# Rewrites deploy/monitoring/devicedeck.rules.yaml from the PrometheusRule beside it (after a
# change there); a test fails while the two differ.
rules: $(RUNTIME_STAMP)
	$(BIN)/python -m devicedeck.rule_file

# Re-resolves the lock files from pyproject.toml (after a change to its dependencies).
lock: $(PY_STAMP)
	$(UV_COMPILE) pyproject.toml -o requirements/runtime.txt
	$(UV_COMPILE) pyproject.toml --extra dev -c requirements/runtime.txt -o requirements/dev.txt
	$(BIN)/python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"], sep="\n")' \
		| $(UV_COMPILE) - -o requirements/build.txt

clean:
	rm -rf $(VENV) node_modules build dist *.egg-info
