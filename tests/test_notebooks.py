"Run every module notebook in nbs/ as a test (the same check as nbdev_test), so CI sees one test per notebook."
import os
from pathlib import Path
import pytest
from nbdev.test import test_nb as run_notebook

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p for p in (ROOT/'nbs').glob('*.ipynb') if not p.name.startswith('_'))
# `#| gpu` cells always run: without a CUDA GPU each one says why it skips (a CPU "Run All" goes through), with one it checks
# the GPU path. NPM_NB_TEST_FLAGS=slow runs the #| slow cells too.
FLAGS = sorted(set(os.environ.get('NPM_NB_TEST_FLAGS', '').split()) | {'gpu'})

@pytest.mark.parametrize('nb', NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook(nb, monkeypatch):
    monkeypatch.chdir(nb.parent)  # notebooks run from nbs/, as nbdev_test does
    ok, _ = run_notebook(nb, skip_flags=[f for f in ('slow', 'gpu') if f not in FLAGS], force_flags=FLAGS, showerr=True)
    assert ok, f'{nb.name} failed; run `nbdev_test --path nbs/{nb.name}` to see the cell'
