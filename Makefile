# `make run` starts the bot, `make test` runs the tests; both create .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Test workers (pytest-xdist): the tests mostly wait on sockets and processes, so four
# workers fill a 2-core machine; `make test TEST_WORKERS=0` runs them in one process.
# worksteal: an idle worker takes tests queued for a busy one (one test takes ~80 s).
TEST_WORKERS ?= 4
# Bytecode is cached even where the environment turns it off (PYTHONDONTWRITEBYTECODE):
# without it every worker rewrites and compiles every test module again (about 16 s of
# CPU each, per run), and every `baton` process the tests start compiles bot/ again.
PYTEST := PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=25

.PHONY: run chat test test-postgres lint bench image clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/python -m bot

chat: $(STAMP)
	$(BIN)/python -m bot chat

test: $(STAMP)
	$(BIN)/ruff check bot tests bench
	$(PYTEST)

# The Slack end-to-end suites again, each harness on a fresh PostgreSQL database of its
# own; needs BATON_TEST_POSTGRES_URL (a server where the user may create databases).
test-postgres: $(STAMP)
	BATON_TEST_DATABASE=postgresql $(PYTEST) tests/slack tests/security tests/mcp

# The container image (Containerfile); CONTAINER=docker builds with Docker.
CONTAINER ?= podman
image:
	$(CONTAINER) build -t baton -f Containerfile .

lint: $(STAMP)
	$(BIN)/ruff check bot tests bench
	$(BIN)/ruff format --check bot tests bench

bench: $(STAMP)
	$(BIN)/python -m bench.fanout
	$(BIN)/python -m bench.loop_overhead
	$(BIN)/python -m bench.isolated_fanout
	$(BIN)/python -m bench.ack_latency
	$(BIN)/python -m bench.sandbox
	$(BIN)/python -m bench.mcp_calls
	$(BIN)/python -m bench.queue
	$(BIN)/python -m bench.context
	$(BIN)/python -m bench.slack_budget
	$(BIN)/python -m bench.streaming
	$(BIN)/python -m bench.replicas
	$(BIN)/python -m bench.pull_request
	$(BIN)/python -m bench.memory

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache *.egg-info
