# GPU Portal: `make run` starts the demo, `make test` runs the whole suite.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
TEST_DATABASE_URL := postgres://postgres@127.0.0.1:5432/gpu_portal
TEST_BROKER_URL := redis://127.0.0.1:6379/15

.PHONY: run test lint services clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Reinstall only when pyproject.toml is newer than the stamp.
$(VENV)/.installed-demo: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[demo]'
	@touch $@

$(VENV)/.installed-test: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $@

run: $(VENV)/.installed-demo
	$(PY) manage.py demo

test: $(VENV)/.installed-test
	DATABASE_URL="$${DATABASE_URL:-$(TEST_DATABASE_URL)}" \
	CELERY_BROKER_URL="$${CELERY_BROKER_URL:-$(TEST_BROKER_URL)}" \
	$(VENV)/bin/pytest $(PYTEST_ARGS)

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# PostgreSQL and Redis for `make test`, on a Debian machine with both installed.
services:
	@pg_isready -q -h 127.0.0.1 -p 5432 || \
		pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql | sort -V | tail -n 1) main start
	@redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 || \
		redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
	@for i in $$(seq 1 30); do \
		pg_isready -q -h 127.0.0.1 -p 5432 && redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && exit 0; \
		sleep 1; \
	done; echo "PostgreSQL or Redis did not answer in 30 s" >&2; exit 1

# The demo's state (database, broker, generated secrets) and caches; keeps the venv.
clean:
	rm -rf var build .pytest_cache .ruff_cache tests/artifacts *.egg-info
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
