# The two entry points of README.md. Both build what they need first (scripts/setup.sh skips
# environments that are already up to date).
SHARED_DATA ?= $(abspath ../shared/data)
export QUANTKIT_DATA_DIR ?= $(SHARED_DATA)
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1

# The external quantizers `make test-backends` runs end to end (each builds its own environment
# first: quantkit setup --backend NAME). docs/BACKENDS.md has what each costs.
TEST_BACKENDS ?= gptqmodel,autoawq,optimum,auto-gptq

.PHONY: setup demo test test-slow test-unit test-backends check-docs

setup:
	scripts/setup.sh

demo: setup
	.venv/bin/quantkit demo

# `make test`: every capability once against its real component. The unit tier runs on two
# workers (pytest-xdist: 146 s against 261 s on a 2-core AVX2 machine); the integration tier runs
# alone, one test at a time, because its timings and its vLLM servers share the machine's cores.
# `make test-slow`: the repeats and wider matrices (marker `slow`).
# The backend tests need environments of their own (minutes each): `make test-backends` runs them.
PYTEST_ARGS ?=
UNIT_WORKERS ?= 2
# The demo model converted once for every tier of a checkout (tests/conftest.py; a clean clone converts
# it in its first tier): ~25-37 s fewer per tier on 2 cores. Set it empty to convert in each session.
export QUANTKIT_TEST_MODEL_CACHE ?= $(CURDIR)/build/test-models
test: check-docs
	.venv/bin/python -m pytest -ra --durations=20 -n $(UNIT_WORKERS) -m "not slow" tests/unit $(PYTEST_ARGS)
	.venv/bin/python -m pytest -ra --durations=60 -m "not slow" tests/integration --ignore=tests/integration/test_backends.py $(PYTEST_ARGS)

test-slow: setup
	.venv/bin/python -m pytest -ra --durations=30 -m slow tests --ignore=tests/integration/test_backends.py $(PYTEST_ARGS)

test-unit: setup
	.venv/bin/python -m pytest -ra tests/unit

test-backends: setup
	QUANTKIT_TEST_BACKENDS=$(TEST_BACKENDS) .venv/bin/python -m pytest -ra tests/unit/test_backends_logic.py tests/integration/test_backends.py

# The guide's statements that name what the code holds (no test reads docs/); `make test` runs it first.
check-docs: setup
	.venv/bin/python scripts/check_docs.py
