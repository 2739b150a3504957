# ChatBridge: `make run` starts the app, `make test` runs every check. Both set themselves up.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
HOST   ?= 127.0.0.1
PORT   ?= 8000

export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: run serve test setup browser npm-clients migrate static lint typecheck docs messages pytest pytest-fast test-fast fuzz race chaos bench bench-quick clean

# The pinned tools and app (requirements.txt includes requirements-app.txt), then ChatBridge
# itself installed as a package (editable), as a project that uses it installs it.
$(STAMP): requirements.txt requirements-app.txt pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "ChatBridge needs Python 3.11+; set PYTHON=python3.11" >&2; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	@# The distribution was called chatbridge before django-chatbridge: not both in one venv.
	$(BIN)/python -m pip uninstall --quiet --disable-pip-version-check -y chatbridge 2>/dev/null || true
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps \
	  --no-build-isolation -e .
	touch $(STAMP)

setup: $(STAMP)

migrate: setup
	$(BIN)/python manage.py migrate --noinput

static: setup
	$(BIN)/python manage.py collectstatic --noinput -v0

# The production settings on loopback with daphne; /mcp is open without a token only when
# HOST is a loopback address. DJANGO_DEBUG=1 make run gives debug pages. Frames over 64 KiB are
# refused unread (ChatBridge has daphne close them with 1009 and a reason).
MCP_PUBLIC := $(if $(filter 127.0.0.1 localhost ::1,$(HOST)),1,0)
run: migrate static
	CHATBRIDGE_MCP_PUBLIC=$${CHATBRIDGE_MCP_PUBLIC:-$(MCP_PUBLIC)} \
	$(BIN)/daphne -b $(HOST) -p $(PORT) --websocket-max-message-size 65536 chatbridge.asgi:application

# The production server (docs/production.md): uvicorn, frames over 64 KiB refused unread (close
# 1009 with a reason); the client's address read only as CHATBRIDGE_TRUSTED_PROXIES says.
serve: migrate static
	$(BIN)/python -m uvicorn chatbridge.asgi:application --host $(HOST) --port $(PORT) \
	  --lifespan on --ws websockets-sansio --ws-max-size 65536 --no-proxy-headers

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

typecheck: setup
	$(BIN)/mypy

# The documentation site (Sphinx, MyST, furo) in docs/_build/html: every page read again, and
# a warning (a broken reference, a docstring Sphinx cannot read) fails the build.
docs: setup
	$(BIN)/sphinx-build -E -a -W --keep-going -q -b html docs docs/_build/html

# The translation catalogs: every marked string extracted into its app's .po files, then
# compiled (.mo, shipped). Translate what is new between the two runs (docs/languages.md).
messages: setup
	$(BIN)/python -m tests.messages

# What the tests need from the distribution: chromium's headless shell (the browser tests; the
# full chromium is used when only it is there) and haproxy (the balancer of the cluster tests),
# installed in one apt-get run when missing and we are root.
# gettext's msgfmt and xgettext check the translation catalogs (tests/test_i18n.py).
SYSTEM_PACKAGES := chromium-headless-shell:chromium-headless-shell haproxy:haproxy gettext:msgfmt
browser:
	@missing=""; for pair in $(SYSTEM_PACKAGES); do package=$${pair%%:*}; program=$${pair#*:}; \
	  PATH="$$PATH:/usr/sbin" command -v $$program >/dev/null 2>&1 || missing="$$missing $$package"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "missing:$$missing; install them (apt-get install$$missing) to run the tests that need them" >&2; fi; fi

# The MCP clients nobody here wrote (tests/clients/package.json, pinned by its lock, Node 22
# included), installed from npm's cache when the lock changed. Without npm the tests that need
# them fail and say why; the rest of the suite still runs.
CLIENTS := tests/clients
CLIENTS_STAMP := $(CLIENTS)/node_modules/.installed

$(CLIENTS_STAMP): $(CLIENTS)/package.json $(CLIENTS)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
	  cd $(CLIENTS) && npm ci --prefer-offline --no-audit --no-fund --loglevel=error && touch node_modules/.installed; \
	else echo "npm is missing: the independent MCP client tests will fail (install node and npm)" >&2; fi

npm-clients: $(CLIENTS_STAMP)

# Most tests wait on servers, browsers and clients: three workers (pytest-xdist) share the two
# cores; each gets its own test database, servers and ports. PYTEST_WORKERS=0 runs them in one.
PYTEST_WORKERS ?= 3
# Bytecode is kept (in the tree's ignored __pycache__ folders) even where the environment says
# not to (PYTHONDONTWRITEBYTECODE): each worker would otherwise rewrite and compile every test
# module's assertions again, about 5 s of CPU a process.
KEEP_BYTECODE = PYTHONDONTWRITEBYTECODE=
pytest: setup browser npm-clients
	$(KEEP_BYTECODE) $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist worksteal $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest: no tests selected" >&2; rc=0; fi; exit $$rc

# The installs are independent (pip, npm, apt): they run side by side, then the checks, side
# by side too (lint, types and the docs fill what the test workers leave of the cores); each
# one's output is shown whole when it ends, and any failure fails the run.
test:
	@$(MAKE) --no-print-directory -j3 setup npm-clients browser
	@$(MAKE) --no-print-directory -j4 --output-sync=target lint typecheck docs pytest

# The inner loop (under a minute here): lint, types, and the tests that need no server
# process, browser or service, and assert no time bound (pytest -m "not slow and not browser
# and not services and not budget"), side by side.
test-fast: setup
	@$(MAKE) --no-print-directory -j3 --output-sync=target lint typecheck pytest-fast

pytest-fast: setup
	$(KEEP_BYTECODE) $(BIN)/python -m pytest -n $(PYTEST_WORKERS) -m "not slow and not browser and not services and not budget" -q $(PYTEST_ARGS); \
	rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest: no tests selected" >&2; rc=0; fi; exit $$rc

# The fuzzers of the reliability suite with 10,000 examples each (CI runs fewer).
fuzz: setup
	CHATBRIDGE_FUZZ_EXAMPLES=10000 $(BIN)/python -m pytest tests/test_reliability.py -k fuzzed -p no:cacheprovider --timeout 3600

# The commitment race harness with 200 trials per abort path (make test runs 30).
race: setup
	CHATBRIDGE_RACE_TRIALS=200 $(BIN)/python -m pytest tests/test_commitment_races.py tests/test_commitment_restarts.py -p no:cacheprovider --timeout 3600

# The outage and race harness (bench/chaos.py): PostgreSQL down 20, 40 and 120 s mid-step,
# hundreds of bookings on every transport while workers are killed and Redis restarts, and the
# race harness at 200 trials a path; what became of each booking, in bench/RESULTS.md.
# About 25 minutes here. CHAOS_ARGS passes options (e.g. CHAOS_ARGS="--bookings 100").
chaos: setup browser static
	$(BIN)/python bench/chaos.py $(CHAOS_ARGS)

# The benchmarks of bench/ (every goal of bench/RESULTS.md, measured side by side; they append
# their results there). bench-quick runs smaller sizes in under two minutes.
bench: setup static
	$(BIN)/python bench/run_all.py

bench-quick: setup static
	$(BIN)/python bench/run_all.py --quick

clean:
	rm -rf $(VENV) $(CLIENTS)/node_modules db.sqlite3 test-db.sqlite3 staticfiles .mypy_cache .ruff_cache .pytest_cache
