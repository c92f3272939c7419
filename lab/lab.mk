# Lab targets (included by the top-level Makefile). Run as root. See docs/lab.md.
LABCTL := $(CURDIR)/lab/labctl

.PHONY: lab-up lab-down lab-status lab-test lab-test-variant lab-test-native lab-test-tiers lab-check-clean e2e \
        chaos demo

# lab-test runs the integration tier and the compute-node e2e tier (whole job lifecycles
# through the node Prolog/Epilog). LAB_TESTS narrows it, e.g. LAB_TESTS=tests/e2e.
LAB_TESTS ?= tests/integration tests/e2e tests/security tests/chaos

# Whole lifecycles under seeded random crashes: `make chaos N=100 [SEED=123]`
# (make test runs one round of it with lab-test); docs/reliability.md has the last run.
N ?= 20
chaos: install
	RSA_CHAOS_ROUNDS=$(N) RSA_CHAOS_SEED=$(SEED) $(MAKE) --no-print-directory lab-test \
	  LAB_TESTS="tests/chaos -s"

e2e: install
	$(MAKE) --no-print-directory lab-test LAB_TESTS=tests/e2e

# Another Debian release's lab (issue 31; docs/lab.md "Another Debian release"): with
# RSA_LAB_DEBIAN=13|testing|12 given on the command line or in the environment, and not
# this host's own release, the lab runs on a host of that release: a sandbox booted from
# lab/host-root's root. lab-up starts one in the background (lab/sandbox --detach
# lab-debianN) and brings the lab up inside; lab-status asks there, lab-down takes the lab
# down and ends the sandbox (lab/sandbox --stop); lab-test and demo run in a sandbox of
# their own until they end. lab/sandbox --exec lab-debianN CMD... runs a command there
# (pytest, rsa, squeue). Inside a sandbox (RSA_LAB_SANDBOX) the lab is always this host's.
HOST_DEBIAN   := $(shell cut -d. -f1 /etc/debian_version 2>/dev/null)
LAB_ELSEWHERE := $(if $(RSA_LAB_SANDBOX),,$(if $(filter command line environment,$(origin \
                 RSA_LAB_DEBIAN)),$(filter-out $(HOST_DEBIAN),$(RSA_LAB_DEBIAN))))
LAB_BOX       := lab-debian$(RSA_LAB_DEBIAN)
# the detached sandbox's command: waits; its end (lab/sandbox --stop) takes the lab down
LAB_KEEPER    := sh -c 'trap "$(LABCTL) down; exit" TERM INT HUP; \
                 while :; do sleep 3600 & wait $$!; done'

# LAB=cluster: the same targets on the cluster lab (lab/cluster: every node its own host,
# in the host lab's shape, CLUSTER_LAB_NODES and CLUSTER_LAB_POOL; docs/lab.md, "The
# cluster lab"), this repository bound into rsad's host for lab-test: lab-up brings it
# up (in native mode with RSA_LAB_MODE=native), lab-status, lab-down (then checks it
# clean), lab-check-clean; lab-test brings it up, runs LAB_TESTS there, takes it down
# and checks it clean, as the host lab's lab-test does (make cluster-lab-test).
ifeq ($(LAB),cluster)
CLUSTER_ENV = RSA_CLUSTER_HARNESS=$(CURDIR) RSA_LAB_DEBIAN=$(RSA_LAB_DEBIAN) \
  RSA_CLUSTER_NODES=$(CLUSTER_LAB_NODES) RSA_CLUSTER_POOL=$(CLUSTER_LAB_POOL)
lab-up: lab-host deb
	$(MAKE) --no-print-directory release-debs
	$(CLUSTER_ENV) lab/cluster/clusterctl up
	$(if $(filter native,$(RSA_LAB_MODE)),$(CLUSTER_ENV) lab/cluster/clusterctl mode native)

lab-down:
	lab/cluster/clusterctl down
	lab/cluster/clusterctl check-clean

lab-status:
	lab/cluster/clusterctl status

lab-check-clean:
	lab/cluster/clusterctl check-clean

lab-test: lab-host deb
	$(MAKE) --no-print-directory cluster-lab-test CLUSTER_LAB_TESTS='$(LAB_TESTS)' \
	  CLUSTER_LAB_MODE=$(or $(RSA_LAB_MODE),queue)
else ifneq ($(LAB_ELSEWHERE),)
lab-up: lab-host
	@lab/sandbox --exec $(LAB_BOX) true 2>/dev/null || \
	  $(LAB_SANDBOX) --detach $(LAB_BOX) $(LAB_KEEPER)
	lab/sandbox --exec $(LAB_BOX) $(MAKE) --no-print-directory $(LAB_VARS) lab-up

lab-down:
	lab/sandbox --stop $(LAB_BOX)

lab-status:
	lab/sandbox --exec $(LAB_BOX) $(LABCTL) status
else
lab-up:
	$(LABCTL) up

lab-down:
	$(LABCTL) down

lab-status:
	$(LABCTL) status
endif

ifneq ($(LAB),cluster)
lab-check-clean:
	$(LABCTL) check-clean
endif

# Bring the lab up, prove a second `labctl up` changes nothing, run the integration and
# e2e tiers, prove the health check sees a dead rsad and chunkserver, ALWAYS bring it down, prove nothing is left, then prove check-clean would
# have seen a leak (it plants one and removes it). The first failure's status wins;
# pytest's 5 (no tests) is not one.
ifeq ($(LAB),cluster)
# (lab-test: above)
else ifneq ($(LAB_ELSEWHERE),)
lab-test: lab-host
	$(call LAB_IN,$(LAB_BOX)-test) lab-test LAB_TESTS='$(LAB_TESTS)'
else
lab-test: install
	@rc=0; \
	trap '$(LABCTL) down; exit 130' INT TERM; \
	$(LABCTL) up || rc=$$?; \
	if [ $$rc -eq 0 ]; then $(LABCTL) verify-up-again || rc=$$?; fi; \
	if [ $$rc -eq 0 ]; then \
	  $(VENV)/bin/pytest -q --durations=30 $(LAB_TESTS) || rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "lab-test: no integration/e2e tests collected"; rc=0; fi; \
	  $(LABCTL) verify-health || { [ $$rc -ne 0 ] || rc=1; }; \
	fi; \
	$(LABCTL) down || { [ $$rc -ne 0 ] || rc=1; }; \
	if $(CURDIR)/lab/check-clean; then \
	  $(LABCTL) verify-check-clean || { [ $$rc -ne 0 ] || rc=1; }; \
	else [ $$rc -ne 0 ] || rc=1; fi; \
	exit $$rc
endif

# The second lab set-up `make test` runs: no accounting (so rsad locks in by priority,
# job_submit.lua with lockin_priority) and PrologFlags=Alloc,Contain (Prolog at allocation
# on every node, extern step). Runs the tests marked `prologflags` or `lockin`.
VARIANT_TESTS ?= -m "prologflags or lockin" tests/e2e tests/integration tests/security

lab-test-variant: install
	RSA_LAB_ACCOUNTING=0 RSA_LAB_PROLOG_FLAGS=Alloc,Contain \
	  $(MAKE) --no-print-directory lab-test LAB_TESTS='$(VARIANT_TESTS)'

# The native-mode lab (RSA_LAB_MODE=native: BurstBufferType=burst_buffer/lua runs
# slurm_plugins/burst_buffer.lua, rsad with slurm.mode native): the whole e2e lifecycle
# suite again, the tests marked `queue` (start hold, early start, decline to the PFS)
# skipped, the native-only ones of tests/e2e/test_native.py run (docs/modes.md).
NATIVE_TESTS ?= tests/e2e

lab-test-native: install
	RSA_LAB_MODE=native $(MAKE) --no-print-directory lab-test LAB_TESTS='$(NATIVE_TESTS)'

# The lab with two tiers (RSA_LAB_TIERS=mixed: rsa1-2 ram, rsa3-4 ssd on disk): the tests
# marked `tiers` (tests/e2e/test_tiers.py: #RSA_TIER=auto in real lifecycles).
TIERS_TESTS ?= -m tiers tests/e2e

lab-test-tiers: install
	RSA_LAB_TIERS=mixed $(MAKE) --no-print-directory lab-test LAB_TESTS='$(TIERS_TESTS)'

# The demo: lab up with a slower PFS (so the RSA's effect shows), the sample jobs with
# the live view (lab/demo.py), the summary, lab down. DEMO_ARGS passes options (--plain,
# --scale 0.3, --keep); DEMO_PFS_RATE the PFS link rate.
DEMO_PFS_RATE ?= 200mbit
DEMO_ARGS ?=

ifneq ($(LAB_ELSEWHERE),)
demo: lab-host
	$(call LAB_IN,$(LAB_BOX)-demo) demo
else
demo: install
	@rc=0; \
	trap '$(LABCTL) down; exit 130' INT TERM; \
	RSA_LAB_PFS_RATE=$(DEMO_PFS_RATE) $(LABCTL) up || rc=$$?; \
	if [ $$rc -eq 0 ]; then $(VENV)/bin/python $(CURDIR)/lab/demo.py $(DEMO_ARGS) || rc=$$?; fi; \
	$(LABCTL) down || { [ $$rc -ne 0 ] || rc=1; }; \
	exit $$rc
endif

# The lab's users, hooks and tests run the package from make's VENV (lab/host-root's
# .venv-debian13 on a Debian 13 lab host), the workflow test its WF_VENV (make's, not
# an outer make's: make test runs a lab phase's make in a sandbox with its own).
export RSA_LAB_VENV = $(VENV)
export RSA_WF_VENV = $(WF_VENV)
