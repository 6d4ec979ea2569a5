# The two entry points of README.md. Both build what they need first (scripts/setup.sh skips
# environments that are already up to date).
SHARED_DATA ?= $(abspath ../shared/data)
export QUANTKIT_DATA_DIR ?= $(SHARED_DATA)
export HF_HUB_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1

.PHONY: setup demo test test-unit

setup:
	scripts/setup.sh

demo: setup
	.venv/bin/quantkit demo

test: setup
	.venv/bin/python -m pytest -ra tests

test-unit: setup
	.venv/bin/python -m pytest -ra tests/unit
