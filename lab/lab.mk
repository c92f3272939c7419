# Lab targets (included by the top-level Makefile). Run as root. See docs/lab.md.
LABCTL := $(CURDIR)/lab/labctl

.PHONY: lab-up lab-down lab-status lab-test lab-test-contain lab-check-clean e2e demo

# lab-test runs the integration tier and the compute-node e2e tier (whole job lifecycles
# through the node Prolog/Epilog). LAB_TESTS narrows it, e.g. LAB_TESTS=tests/e2e.
LAB_TESTS ?= tests/integration tests/e2e

e2e: install
	$(MAKE) --no-print-directory lab-test LAB_TESTS=tests/e2e

lab-up:
	$(LABCTL) up

lab-down:
	$(LABCTL) down

lab-status:
	$(LABCTL) status

lab-check-clean:
	$(LABCTL) check-clean

# Bring the lab up, run the integration and e2e tiers, ALWAYS bring it down, then prove
# nothing is left. The first failure's status wins; pytest's 5 (no tests) is not one.
lab-test: install
	@rc=0; \
	trap '$(LABCTL) down; exit 130' INT TERM; \
	$(LABCTL) up || rc=$$?; \
	if [ $$rc -eq 0 ]; then \
	  $(VENV)/bin/pytest -q $(LAB_TESTS) || rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "lab-test: no integration/e2e tests collected"; rc=0; fi; \
	fi; \
	$(LABCTL) down || { [ $$rc -ne 0 ] || rc=1; }; \
	$(CURDIR)/lab/check-clean || { [ $$rc -ne 0 ] || rc=1; }; \
	exit $$rc

# The tests marked `prologflags` again, with the lab's Slurm on PrologFlags=Alloc,Contain
# (Prolog at allocation on every node, extern step): `make test` runs both set-ups.
CONTAIN_TESTS ?= -m prologflags tests/e2e tests/integration/test_spank.py

lab-test-contain: install
	RSA_LAB_PROLOG_FLAGS=Alloc,Contain $(MAKE) --no-print-directory lab-test \
	  LAB_TESTS="$(CONTAIN_TESTS)"

# The demo: lab up with a slower PFS (so the RSA's effect shows), the sample jobs with
# the live view (lab/demo.py), the summary, lab down. DEMO_ARGS passes options (--plain,
# --scale 0.3, --keep); DEMO_PFS_RATE the PFS link rate.
DEMO_PFS_RATE ?= 200mbit
DEMO_ARGS ?=

demo: install
	@rc=0; \
	trap '$(LABCTL) down; exit 130' INT TERM; \
	RSA_LAB_PFS_RATE=$(DEMO_PFS_RATE) $(LABCTL) up || rc=$$?; \
	if [ $$rc -eq 0 ]; then $(VENV)/bin/python $(CURDIR)/lab/demo.py $(DEMO_ARGS) || rc=$$?; fi; \
	$(LABCTL) down || { [ $$rc -ne 0 ] || rc=1; }; \
	exit $$rc
