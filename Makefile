# durablecache: `make run` (a local cluster) and `make test` need only python3.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
NODES ?= 3
PORT ?= 8000
DATA_DIR ?= $(or $(DURABLECACHE_DATA_DIR),var)

.PHONY: install run test test-stock test-js check-deploy lint format clean

$(VENV)/.installed: requirements.txt requirements-embedded.txt requirements-dev.txt sdk/python/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -U pip
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	$(PY) -m pip install -q --disable-pip-version-check -e sdk/python
	touch $@

install: $(VENV)/.installed

run: install
	@mkdir -p $(DATA_DIR)
	@$(PY) manage.py migrate -v0
	@$(PY) manage.py issue_token admin --operator --new-password > $(DATA_DIR)/admin.txt
	@echo "------------------------------------------------------------------"
	@echo " durablecache: $(NODES) node(s) from http://127.0.0.1:$(PORT)"
	@echo " dashboard:    http://127.0.0.1:$(PORT)/dashboard/"
	@echo "   log in as admin, $$(head -1 $(DATA_DIR)/admin.txt)"
	@echo " API token:    $$(tail -1 $(DATA_DIR)/admin.txt)  (operator)"
	@echo " websocket:    ws://127.0.0.1:$(PORT)/ws/v1/subscribe"
	@echo " stop with Ctrl-C"
	@echo "------------------------------------------------------------------"
	@exec $(PY) manage.py runcluster --nodes $(NODES) --base-port $(PORT)

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(PY) -m mypy --config-file sdk/python/pyproject.toml sdk/python/durablecache_client
	$(VENV)/bin/lint-imports

format: install
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

test: lint browser test-js check-deploy
	$(PY) manage.py makemigrations --check --dry-run
	$(PY) manage.py check
	$(PY) -m pytest

# Django's deployment checks with a production-shaped environment
# (tests/deploy.env: DEBUG off, a real-looking key, behind a TLS proxy):
# any warning fails. In a subshell, so the rest of the environment stays.
check-deploy: install
	@(set -a; . tests/deploy.env; set +a; \
	  $(PY) manage.py check --deploy --fail-level WARNING)

# The TypeScript client's unit tests (Node >= 20 and npm); skipped with the
# reason where npm is missing, except in CI (DURABLECACHE_REQUIRE_BROWSER=1).
test-js:
	@if command -v npm >/dev/null; then \
	  cd sdk/js && npm ci --no-audit --no-fund --loglevel=error && npm test; \
	elif [ -n "$$DURABLECACHE_REQUIRE_BROWSER" ]; then \
	  echo "npm is missing: the TypeScript client cannot be tested"; exit 1; \
	else echo "no npm: the TypeScript client's tests are skipped"; fi

# The end-to-end tests on the stock stack: every piece of durablecache.server
# off (stock Daphne, Django's ASGI handler and SQLite backend). CI runs it
# once, so the tuning stays optional.
test-stock: install
	DURABLECACHE_SERVER_TUNING=false $(PY) -m pytest -m integration

# The dashboard's browser tests drive Debian's Chromium through Playwright
# (no browser download). Installed when missing and this is a Debian machine
# where we are root; elsewhere those tests are skipped with the reason, and
# CI (DURABLECACHE_REQUIRE_BROWSER=1) fails instead.
browser:
	@test -x /usr/bin/chromium || { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	  apt-get install -y -q chromium >/dev/null && echo "installed Debian's chromium"; } || \
	  echo "no /usr/bin/chromium: the browser tests will be skipped"

clean:
	rm -rf $(VENV) var

# Failover: SIGKILL a primary 5 times, with and without the peer probe;
# writes bench/failover.json. See docs/performance.md.
.PHONY: browser bench-failover
bench-failover: install
	timeout -s INT -k 30 900 $(PY) -m bench.failover

# One offline queue grown to 1,000,000 events alone (node RSS and the
# pending-count time every 100k); make bench grows it as far as its
# 10 minutes allow. Writes bench/growth.json. See docs/performance.md.
.PHONY: bench-growth
bench-growth: install
	$(PY) -m pip install -q --disable-pip-version-check -r bench/requirements.txt
	timeout -s INT -k 30 480 $(PY) -m bench.run --rounds 0 --kills 0 \
	  --recovery-events 0 --budget 450 --failover-reserve 0 --output bench/growth.json

# A bounded queue (max_queued 100,000) overflowed by 1,000,000 events over
# 10,000 keys, its recovery (hello -> marker) against a replay of 10,000
# events, alone on a fresh node (~35 s); make bench runs it too. Writes
# bench/recovery.json. See docs/performance.md.
.PHONY: bench-recovery
bench-recovery: install
	timeout -s INT -k 30 300 $(PY) -m bench.recovery --output bench/recovery.json

# CPU per put and per replayed event, by process and by Daphne thread, on
# one node (under a minute). See docs/performance.md.
.PHONY: bench-split
bench-split: install
	$(PY) -m pip install -q --disable-pip-version-check -r bench/requirements.txt
	timeout -s INT -k 30 600 $(PY) -m bench.split

# The live fan-out alone (2 nodes, redundancy 1, 100 subscribers x 100
# writes/s, against Mosquitto; 3 rounds), then its latency budget (a traced
# round): bench/live.json and bench/budget.json, or with STACK=postgres on
# this machine's PostgreSQL and Redis (PG_URL, REDIS_URL below)
# bench/live-postgres.json and bench/budget-postgres.json (~4 min).
# `make bench-subscribers [STACK=postgres]`: the enqueue into 1 and 10
# offline queues and Mosquitto sessions, and the cost of each extra
# subscriber (~2 min). See docs/performance.md.
STACK ?= embedded
STACK_ENV = $(if $(filter postgres,$(STACK)),DURABLECACHE_DATABASE_URL=$(PG_URL) DURABLECACHE_REDIS_URL=$(REDIS_URL),)
STACK_SUFFIX = $(if $(filter postgres,$(STACK)),-postgres,)
.PHONY: bench-live bench-subscribers
bench-live: install
	$(PY) -m pip install -q --disable-pip-version-check -r bench/requirements.txt
	$(STACK_ENV) timeout -s INT -k 30 400 $(PY) -m bench.live --rounds 3 \
	  --output bench/live$(STACK_SUFFIX).json
	$(STACK_ENV) timeout -s INT -k 30 200 $(PY) -m bench.live --budget --no-mosquitto \
	  --output bench/budget$(STACK_SUFFIX).json
bench-subscribers: install
	$(PY) -m pip install -q --disable-pip-version-check -r bench/requirements.txt
	$(STACK_ENV) timeout -s INT -k 30 300 $(PY) -m bench.subscribers \
	  --output bench/subscribers$(STACK_SUFFIX).json

# Benchmarks side by side with Mosquitto: bounded, 127.0.0.1 only; prints a
# table and writes bench/results.json, then one round with the server tuning
# off (bench/results-stock.json). See docs/performance.md.
.PHONY: bench
bench: install
	$(PY) -m pip install -q --disable-pip-version-check -r bench/requirements.txt
	timeout -s INT -k 30 600 $(PY) -m bench.run
	DURABLECACHE_SERVER_TUNING=false timeout -s INT -k 30 300 $(PY) -m bench.run \
	  --rounds 1 --growth-events 0 --growth-min 0 --recovery-events 0 --kills 0 \
	  --budget 280 --failover-reserve 0 \
	  --output bench/results-stock.json

# The same scenarios on PostgreSQL and a Redis server (the production
# stack): PG_URL and REDIS_URL name them (defaults: this machine's local
# servers); the harness creates fresh databases and drops them afterwards.
# Writes bench/results-postgres.json. See docs/performance.md.
PG_URL ?= postgres://postgres@127.0.0.1:5432/postgres
REDIS_URL ?= redis://127.0.0.1:6379/0
.PHONY: bench-postgres
bench-postgres: install
	$(PY) -m pip install -q --disable-pip-version-check -r bench/requirements.txt
	DURABLECACHE_DATABASE_URL=$(PG_URL) DURABLECACHE_REDIS_URL=$(REDIS_URL) \
	  timeout -s INT -k 30 600 $(PY) -m bench.run --growth-events 0 --growth-min 0 \
	  --recovery-events 0 --kills 0 --failover-reserve 0 \
	  --output bench/results-postgres.json
