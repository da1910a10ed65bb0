# The two commands of the README:
#   make demo   set up, prepare Multi30k de-en, train a small model, translate the test set, score
#   make test   set up, lint, then run the test suite (what .ci/run calls)
# For the inner loop: make test-fast (the unit tier, well under two minutes; the tiers are
# the folders tests/unit, tests/integration, tests/system) and make lint (ruff, rules in ruff.toml).
VENV ?= .venv
PYTHON := $(VENV)/bin/python
PYTEST_ARGS ?=
# test files run side by side, one per core (at most 4; TEST_WORKERS=0 runs them in this process)
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; echo $$n)

.PHONY: setup demo lint test test-fast bench clean
# the test extras and the align extra (eflomal, for the dictionary of unknown-word replacement,
# which the documentation's commands run); EXTRAS=... chooses others
setup:
	VENV=$(VENV) EXTRAS=$${EXTRAS-test,align} scripts/setup-env.sh

# demo sets up by itself, without the test extras (pytest, matplotlib) that `make setup` adds
demo:
	VENV=$(VENV) scripts/quickstart.sh

lint: setup
	$(VENV)/bin/ruff check --quiet .

# The tiers by cost, cheapest first (the folders under tests/), each on every core; the first tier that
# fails stops the run. pytest exits 5 when it collected no test: unless PYTEST_ARGS selects tests
# (-k, -m or a path under tests/), that is a broken suite, not a pass. The tiers share one folder
# of synthetic corpora (RAN_TEST_CORPORA, tests/corpora.py), removed at the end.
# Each tier collects its own folder only (unless PYTEST_ARGS names paths under tests/). The system
# tier runs one file more than there are workers: its Slurm jobs and deadlines mostly wait.
TIERS := unit integration system
test: setup lint
	@start=$$(date +%s); corpora=$$(mktemp -d); trap 'rm -rf "$$corpora"' EXIT; \
	export RAN_TEST_CORPORA=$$corpora; for tier in $(TIERS); do \
	    echo "make test: the $$tier tier"; where=tests/$$tier; workers=$(TEST_WORKERS); \
	    if echo " $(PYTEST_ARGS)" | grep -qE ' tests/'; then where=; fi; \
	    if [ $$tier = system ] && [ $$workers -gt 0 ]; then workers=$$((workers + 1)); fi; \
	    $(PYTHON) -m pytest $$where -n $$workers --dist loadfile --no-loadscope-reorder -m $$tier $(PYTEST_ARGS); rc=$$?; \
	    if [ $$rc -eq 5 ] && ! echo " $(PYTEST_ARGS)" | grep -qE ' (-k|-m|tests/)'; then \
	        echo "make test: pytest collected no $$tier test" >&2; exit 1; fi; \
	    if [ $$rc -ne 0 ] && [ $$rc -ne 5 ]; then exit $$rc; fi; \
	done; echo "make test: all tiers passed in $$(( $$(date +%s) - start )) s"

test-fast: setup
	@$(PYTHON) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m fast $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test-fast: pytest collected no tests" >&2; exit 1; fi; exit $$rc

bench: setup
	$(PYTHON) scripts/bench.py --data data-bin/multi30k.de-en --systems configs/bench/foundation.json \
	    --out bench-out/foundation

# What a run writes that can be made again (all git-ignored): checkpoints, data-bins, benchmark
# output, the scratch folder of the documented small examples (runs/) and the demo's output
# (demo-out/). Never results/: it holds the committed measurements.
clean:
	rm -rf checkpoints data-bin bench-out runs demo-out
