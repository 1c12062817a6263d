# Set-up is part of every target: a fresh machine needs only `make demo` or `make test`.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell sha256sum pyproject.toml | cut -c1-12)

.PHONY: demo test test-base test-native native lint typecheck system-deps claude-code mcp-servers bench soak clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[all,dev]'
	rm -f $(VENV)/.installed-*
	touch $@

# Debian packages the sandbox tests need; installed only when missing and when we are root.
system-deps:
	@if ! command -v bwrap >/dev/null || ! command -v firejail >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap firejail >/dev/null; \
		else echo "note: bubblewrap/firejail missing and not root; sandbox tests will be skipped"; fi; \
	fi
	@if ! command -v systemd-analyze >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >/dev/null; \
		else echo "note: systemd-analyze missing and not root; the unit's verify test will be skipped"; fi; \
	fi
	@# a C compiler and the Python headers for the compiled build (make native)
	@if ! command -v gcc >/dev/null || ! test -f "$$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h"; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc python3-dev >/dev/null; \
		else echo "note: gcc or the Python headers missing and not root; make native will fail"; fi; \
	fi
	@# PostgreSQL server binaries (initdb, pg_ctl) for the PostgreSQL store's tests
	@if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
		else echo "note: PostgreSQL missing and not root; its tests will fail"; fi; \
	fi

# The real Claude Code CLI for the integration tests (pinned; npm and node are prerequisites).
CLAUDE_CODE_VERSION := 2.1.328
CLAUDE := .cache/claude-code/node_modules/.bin/claude
claude-code: $(CLAUDE)
$(CLAUDE):
	npm install --silent --no-audit --no-fund --prefix .cache/claude-code @anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION) >/dev/null

# Third-party MCP servers the gateway is tested against (pinned; the PyPI ones are dev extras).
MCP_FS_VERSION := 2026.8.31
MCP_FS := .cache/mcp-servers/node_modules/.bin/mcp-server-filesystem
mcp-servers: $(MCP_FS)
$(MCP_FS):
	npm install --silent --no-audit --no-fund --prefix .cache/mcp-servers @modelcontextprotocol/server-filesystem@$(MCP_FS_VERSION) >/dev/null

demo: $(STAMP)
	$(VENV)/bin/callgate demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy

test: system-deps $(STAMP) $(CLAUDE) $(MCP_FS) lint typecheck test-base test-native
	$(PY) -m pytest

# The base install: the package without extras (no z3, tree-sitter, httpx, sqlglot, server,
# postgres) answers --help and decides a call. Its dependencies are installed once per
# pyproject.toml; the package itself is rebuilt from the tree on every run.
BASE := .venv-base
BASE_STAMP := $(BASE)/.deps-$(shell sha256sum pyproject.toml | cut -c1-12)
BASE_CALL := {"tool": "read_file", "tool_class": "file", "action": "read", "parameters": {"path": "./data/notes.txt"}}

$(BASE_STAMP): pyproject.toml
	rm -rf $(BASE) && python3 -m venv $(BASE)
	$(BASE)/bin/python -m pip install -q --upgrade pip
	$(BASE)/bin/python -m pip install -q .
	touch $@

test-base: $(BASE_STAMP)
	$(BASE)/bin/python -m pip install -q --no-deps --force-reinstall .
	$(BASE)/bin/python -c "import importlib.util as u, sys; extra = [m for m in ('z3', 'tree_sitter', 'httpx', 'sqlglot', 'starlette', 'uvicorn', 'psycopg', 'mcp', 'orjson') if u.find_spec(m)]; sys.exit(f'extras installed in the base venv: {extra}' if extra else 0)"
	cd $(BASE) && bin/callgate --help >/dev/null
	cd $(BASE) && echo '$(BASE_CALL)' | bin/callgate decide --preset safe-research | tee /dev/stderr | grep -q '"verdict": "allow"'
	$(BASE)/bin/callgate policy lint examples/research-agent.yaml

# The compiled build: the decision path's modules (pyproject.toml, hooks.mypyc) compiled by
# mypyc into a wheel built from a copy of the tree, installed apart in $(NATIVE)/site; the
# editable install in .venv stays pure Python. `PYTHONPATH=$(NATIVE)/site` runs it.
NATIVE := .cache/native
native: $(STAMP)
	rm -rf $(NATIVE) && mkdir -p $(NATIVE)/tree
	cp -r pyproject.toml README.md src $(NATIVE)/tree/
	find $(NATIVE)/tree -name __pycache__ -prune -exec rm -rf {} +
	cd $(NATIVE)/tree && HATCH_BUILD_HOOK_ENABLE_MYPYC=true $(CURDIR)/$(PY) -m pip wheel -q \
		--no-deps --no-build-isolation -w ../dist .
	$(PY) -m pip install -q --no-deps --target $(NATIVE)/site $(NATIVE)/dist/callgate-*.whl

# The tests of the compiled modules, run on the compiled build (tests marked `interpreted`
# patch internals that compiled code does not look up, and run on the pure build only).
NATIVE_TESTS := tests/kernel tests/temporal tests/guards tests/abstraction tests/matchers \
	tests/audit tests/attacks tests/replay tests/evaluation tests/test_native_build.py
test-native: native
	CALLGATE_NATIVE=1 PYTHONPATH=$(NATIVE)/site $(PY) -m pytest -q -p no:cacheprovider \
		-m "not interpreted" $(NATIVE_TESTS)

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

# The crash soak: 200 sidecars killed with SIGKILL mid-decision over one PostgreSQL while
# clients keep calling (make test runs a short version).
soak: system-deps $(STAMP)
	CALLGATE_CRASH_KILLS=200 $(PY) -m pytest -s tests/integrations/sidecar/test_crash.py

clean:
	rm -rf $(VENV) $(BASE) .cache/claude-code .cache/mcp-servers .mypy_cache .ruff_cache .pytest_cache
