# The two fresh-machine commands are `make run` and `make test`; both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Re-installs whenever pyproject.toml (dependencies, entry points) or constraints.txt (their exact pins) changes.
STAMP := $(VENV)/.installed
# `make run NODES=5 PORT=50061`: only what is given is passed on, so a restart keeps the cluster's own shape.
NODES ?=
PORT ?=
CLUSTER_DIR ?= .groupcoord/cluster
# kafkajs for tests/kafka/test_kafkajs.py, exactly as package-lock.json pins it; again when either file changes.
JS := tests/kafka/js
JS_STAMP := $(JS)/node_modules/.installed

.PHONY: venv run cluster stop test check lint proto image system js api

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check --quiet -c constraints.txt -e '.[dev,spark]'
	touch $(STAMP)

# The demo: a local 3-node cluster, four workers, a coordinator killed with SIGKILL, no rebalance.
# `make run TLS=1`: the same over TLS with client certificates (a development CA in .groupcoord/demo/tls).
run: $(STAMP)
	exec $(BIN)/python examples/demo.py $(if $(TLS),--tls)

# A local cluster (3 nodes on 127.0.0.1-3) in the foreground; Ctrl-C or SIGTERM stops every node.
# `exec` so that a signal make forwards reaches groupcoord itself, not an intermediate shell.
cluster: $(STAMP)
	exec $(BIN)/groupcoord cluster up --dir $(CLUSTER_DIR) --foreground $(if $(NODES),--nodes $(NODES)) \
		$(if $(PORT),--base-port $(PORT)) $(if $(TLS),--tls)

# Stops a cluster left running by `groupcoord cluster up` without --foreground.
stop: $(STAMP)
	$(BIN)/groupcoord cluster down --dir $(CLUSTER_DIR)

# The static checks, run first by `make test`: ruff, then mypy in strict mode over the package ([tool.mypy] in
# pyproject.toml; scripts/typecheck.py maps the folders to their sub-packages, as the install does). mypy keeps
# its cache in .mypy_cache: about 20 s of CPU from cold, a second or two after an edit.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python scripts/typecheck.py

# The quick loop before a commit, under a minute on 2 cores with no root, Docker, Java or Chromium: `lint`'s ruff,
# then its mypy beside the in-process tests (tests/unit, tests/raft but its `timing` ones) on one xdist worker per
# core, each property test on a tenth of its hypothesis examples (tests/unit/profiles.py). worksteal: a worker left
# with slow tests (session timeouts, elections) hands them over. `make test` runs the whole suite, every example.
# `CHECK_WORKERS=4`: more. mypy prints when it is done; either failing fails the check. Beside the tests, mypy's
# cold cache (about 20 s of CPU) costs little wall time.
CHECK_WORKERS ?= auto
check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python scripts/typecheck.py & typecheck=$$!; \
	HYPOTHESIS_PROFILE=check $(BIN)/pytest tests/unit tests/raft -m 'not timing' -q --durations=10 \
		-n $(CHECK_WORKERS) --dist worksteal; tests=$$?; \
	wait $$typecheck && exit $$tests

# The container tests (tests/deploy) run the image; building it again is quick once the base exists.
test: system lint image js
	$(BIN)/pytest

# Java, Chromium, iproute2, Docker (started if none answers), debootstrap, kcat, Node.js and npm: apt-installed
# when missing, as root.
system:
	scripts/system-deps

# npm (from `system`) installs kafkajs into tests/kafka/js/node_modules; `npm ci` installs the lock file or fails.
js: $(JS_STAMP)

$(JS_STAMP): $(JS)/package.json $(JS)/package-lock.json
	cd $(JS) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# groupcoord:latest from a wheelhouse made here (deploy/build-image picks the base image itself).
image: $(STAMP)
	deploy/build-image

# The SDK's API reference (pdoc, from the docstrings): build/api/index.html.
api: $(STAMP)
	$(BIN)/python scripts/api_reference.py build/api

proto: $(STAMP)
	$(BIN)/python -m groupcoord.protocol.generate
