# Two commands matter: `make run` (the whole stack locally) and `make test` (every test).
# Both create .venv and install on a fresh machine by themselves.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed

.PHONY: run test install node screenshots lint typecheck schemas docs bench bench-bus bench-prefix bench-runtime bench-proxy bench-inject bench-compaction bench-e2e bench-sandbox bench-stream bench-wake bench-history bench-dormant bench-workers bench-cluster bench-cluster-inbox bench-order bench-images bench-lifecycle bench-faults bench-faults-disk bench-stalls soak eval clean

# uv (from PyPI) resolves the same versions as pip and installs them in a tenth of the time (CI installs
# from nothing on every run); pip does it where uv cannot be had.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	if $(BIN)/pip install -q uv && $(BIN)/uv pip install -q --python $(BIN)/python -e '.[dev]'; then :; \
	else $(BIN)/pip install -q --upgrade pip && $(BIN)/pip install -q -e '.[dev]'; fi
	touch $(STAMP)

# Tolerant on a developer machine (the Node-based tests skip without node_modules); .ci/run is strict.
$(NODE_STAMP): package.json
	@if ! command -v npm >/dev/null 2>&1; then echo "npm not found: the real-yjs, browser and AsyncAPI tests will be skipped"; \
	elif npm install --no-audit --no-fund --silent; then touch $(NODE_STAMP); \
	else echo "npm install failed: the Node-based tests will be skipped"; fi

install: $(STAMP)

node: $(NODE_STAMP)

run: $(STAMP)
	$(BIN)/python -m services.stack

# The tests mostly wait (on services, Redis, timers), so they run in PYTEST_WORKERS processes
# (pytest-xdist), each with a redis-server of its own; a module's tests stay on one worker
# (tests/conftest.py). PYTEST_WORKERS=0 runs everything in this one process.
# Three, not four: with four on two cores the headless browser's module starved beside the chaos
# tests (a 90 s wait exceeded), for about a minute less in all.
# pytest exits 5 when a selection (PYTEST_ARGS) collects no tests: that is not a failure.
PYTEST_WORKERS ?= 3
test: $(STAMP) $(NODE_STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest: no tests collected"; exit 0; fi; exit $$rc

# The browser tests' pictures into docs/screenshots (the README links them); `make test` keeps its own elsewhere.
screenshots: $(STAMP) $(NODE_STAMP)
	GAMMA_SCREENSHOTS_DIR=$(CURDIR)/docs/screenshots $(BIN)/python -m pytest -q -p no:cacheprovider tests/e2e

lint: $(STAMP)
	$(BIN)/ruff check shared services scripted tools tests bench
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy shared services scripted tools

schemas: $(STAMP)
	$(BIN)/python -m shared.contracts.schemas tests/contract/schemas

docs: $(STAMP)
	$(BIN)/python -m tools.docs docs
	$(BIN)/python -m scripted.settings

bench-bus: $(STAMP)
	$(BIN)/python bench/bus.py
bench-prefix: $(STAMP)
	$(BIN)/python bench/prefix.py
	$(BIN)/python bench/prefix_connectors.py
	$(BIN)/python bench/prefix_regimes.py
bench-runtime: $(STAMP)
	$(BIN)/python bench/runtime.py
bench-proxy: $(STAMP)
	$(BIN)/python bench/proxy.py
bench-inject: $(STAMP)
	$(BIN)/python bench/inject.py
bench-compaction: $(STAMP)
	$(BIN)/python bench/compaction.py
bench-faults-disk: $(STAMP)
	$(BIN)/python bench/faults_disk.py
bench-images: $(STAMP)
	$(BIN)/python bench/images.py
# Another tenant's round trip while one attacks the shared loops (connector schemas, image decoding).
bench-stalls: $(STAMP)
	$(BIN)/python bench/stalls.py $(STALLS_ARGS)
bench-stream: $(STAMP)
	$(BIN)/python bench/stream.py
bench-wake: $(STAMP)
	$(BIN)/python bench/wake_load.py $(WAKE_ARGS)
bench-history: $(STAMP)
	$(BIN)/python bench/history.py $(HISTORY_ARGS)
bench-e2e: $(STAMP)
	$(BIN)/python bench/e2e.py $(E2E_ARGS)
bench-sandbox: $(STAMP)
	$(BIN)/python bench/sandbox.py
bench-dormant: $(STAMP)
	$(BIN)/python bench/dormant_memory.py $(DORMANT_ARGS)
bench-workers: $(STAMP)
	$(BIN)/python bench/runtime_workers.py
# Redis Cluster beside a single Redis: GAMMA_BENCH_CLUSTER_URL names a node of a running cluster
# (`make bench-e2e E2E_ARGS=--cluster` starts its own; `bench/bus.py --cluster-url` for the bus).
bench-cluster: $(STAMP)
	$(BIN)/python bench/cluster.py
bench-cluster-inbox: $(STAMP)
	$(BIN)/python bench/cluster_inbox.py
bench-order: $(STAMP)
	$(BIN)/python bench/order.py
# Workspace snapshots per tool batch, rewind and fork, against writing and copying the files.
bench-lifecycle: $(STAMP)
	$(BIN)/python bench/lifecycle.py

# Faults: prompt -> answer on a normal vs a 20 ms-fsync disk (bench/faults_disk.py), then with 0 vs
# 50 ms of Redis latency (bench/faults_net.py); each side by side in its own run.
bench-faults: bench-faults-disk $(STAMP)
	$(BIN)/python bench/faults_net.py
# The nightly soak: 50 sessions of mixed traffic for 20 minutes at a fixed rate (SOAK_ARGS e.g. "--minutes 3 --rate 2").
soak: $(STAMP)
	$(BIN)/python -m bench.soak --minutes 20 $(SOAK_ARGS)

# Workflow evaluations (evals/*.yaml) through the real stack: the scripted model offline, the real
# one with OPENAI_API_KEY set. EVAL_ARGS e.g. "--runs 5 --only deck-basic,edit-basic".
eval: $(STAMP)
	$(BIN)/python bench/eval.py $(EVAL_ARGS)

bench: bench-bus bench-prefix bench-runtime bench-proxy bench-inject bench-compaction bench-e2e bench-sandbox

clean:
	rm -rf $(VENV) node_modules data .pytest_cache .mypy_cache .ruff_cache
