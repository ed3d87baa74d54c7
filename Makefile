# GPU Portal: `make run` starts the demo, `make test` runs the whole suite.
# Both work on a fresh Debian machine: see tools/ for what they install and check.

VENV := .venv
PY := $(VENV)/bin/python

.PHONY: run test lint schema messages clean

# Any Python 3.11 or newer on the PATH (tools/find-python); PYTHON=... picks another.
$(PY):
	@tools/make-venv $(VENV)

# Reinstall only when pyproject.toml is newer than the stamp.
$(VENV)/.installed-demo: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[demo,reconcile]'
	@touch $@

$(VENV)/.installed-test: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[test,reconcile]'
	@touch $@

run: $(VENV)/.installed-demo
	$(PY) manage.py compile_translations
	$(PY) manage.py demo

# The suite starts its own throwaway PostgreSQL and Redis (tests/servers.py) unless
# DATABASE_URL / CELERY_BROKER_URL name existing ones. It runs in TEST_WORKERS processes
# (pytest-xdist, a test file per worker at a time; each worker has its own database and
# Redis database) and ends with the 20 slowest tests. TEST_WORKERS=0 runs it in one.
TEST_WORKERS ?= 2
test: $(VENV)/.installed-test
	@tools/ensure-test-tools
	$(PY) manage.py compile_translations
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile --durations=20 $(PYTEST_ARGS)

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

# The published API contract; a test fails when it is out of date with the code.
schema: $(VENV)/.installed-test
	$(PY) manage.py spectacular --validate --fail-on-warn --file docs/api/openapi.yaml

# Add newly marked strings to the Chinese catalog (needs GNU gettext), then translate them.
messages: $(VENV)/.installed-test
	$(PY) manage.py makemessages -l zh_Hans --no-location --ignore='.venv/*' --ignore='tests/*' \
		--ignore='bench/*' --ignore='agent/*' --ignore='var/*' --ignore='docs/*'

# The demo's state (database, broker, generated secrets) and caches; keeps the venv.
clean:
	rm -rf var build .pytest_cache .ruff_cache tests/artifacts *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
