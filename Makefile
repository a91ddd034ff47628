# The two fresh-machine commands are `make run` and `make test`; both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Re-installs whenever pyproject.toml (dependencies, entry points) changes.
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 50051

.PHONY: venv run test lint proto

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check --quiet -e '.[dev]'
	touch $(STAMP)

# A single node for now; the Raft issue turns this into a local 3-node cluster.
run: $(STAMP)
	$(BIN)/groupcoord node --host $(HOST) --port $(PORT)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: lint
	$(BIN)/pytest

proto: $(STAMP)
	$(BIN)/python -m groupcoord.protocol.generate
