# Set-up is part of every target: a fresh machine needs only `make demo` or `make test`.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell sha256sum pyproject.toml | cut -c1-12)

.PHONY: demo test lint typecheck system-deps bench clean

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

demo: $(STAMP)
	$(VENV)/bin/callgate demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy

test: system-deps $(STAMP) lint typecheck
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
