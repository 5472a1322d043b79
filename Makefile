# make demo: set up what jitprof needs, then profile the bundled demo.
# make test: set up that and what the tests need, then run every test (unit
# and e2e).  Both work on a fresh machine as root.
VENV = .venv
PYTHON = $(VENV)/bin/python
JITPROF = $(VENV)/bin/jitprof

.PHONY: setup setup-tests demo test unit e2e bench fuzz soak soak-push lint fixtures clean

setup:
	@bash scripts/setup.sh

setup-tests:
	@bash scripts/setup-tests.sh

fixtures:
	@$(MAKE) -s -C fixtures

demo: setup
	$(JITPROF) -F 99 -o demo.html -o demo.svg -o demo.folded -- node fixtures/js/demo.js 5
	@echo "open demo.html (or demo.svg) in a browser"

test: setup-tests
	$(PYTHON) -m pytest -q tests e2e

unit: setup-tests
	$(PYTHON) -m pytest -q tests

e2e: setup-tests
	$(PYTHON) -m pytest -q e2e

bench: setup-tests
	@dpkg -s linux-perf >/dev/null 2>&1 || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf >/dev/null
	$(PYTHON) -m benchmarks.run --write docs/benchmarks.md

# Mutated ELF/DWARF/.gopclntab files through the symbolising path, under the
# limits jitprof runs it with; findings are kept in tests/data/fuzz/.
fuzz: setup-tests
	$(PYTHON) -m tests.fuzz_symbolizing --runs $(or $(RUNS),3000) --seed $(or $(SEED),1)

soak: setup-tests
	benchmarks/soak/run.sh

soak-push: setup-tests
	benchmarks/soak/push.sh

# The formatters (ruff format; clang-format with .clang-format for bpf/ and
# native/; fixtures keep their layout, tests name their lines) and the checkers.
lint: setup-tests
	@$(VENV)/bin/pip install -q --disable-pip-version-check -e '.[lint]'
	@command -v clang-format >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang-format >/dev/null
	$(VENV)/bin/ruff format --check profiler tests e2e benchmarks
	clang-format --dry-run -Werror bpf/*.c bpf/*.h native/*.c native/*.h
	$(VENV)/bin/ruff check profiler tests e2e benchmarks
	$(VENV)/bin/mypy profiler benchmarks

clean:
	$(MAKE) -s -C fixtures clean
	$(MAKE) -s -C native clean
	rm -rf $(VENV) .pytest_cache
