"""Run every chapter in nbs/ as a user's Run All in Jupyter would: a real kernel (nbclient, as `jupyter nbconvert --execute`),
every cell top to bottom, `#| eval: false` cells included. One test per chapter; this one run is also the chapter's test
(its asserts), so CI executes each chapter once. `make book` (tests/book.py) runs the same runner to write the outputs
into the chapters; tests/test_book.py only checks, without executing, that they are up to date.

`#| slow` cells (a minute or more each on a loaded 2-core CPU, or a download; each chapter says how long) are left out
unless NPM_NB_TEST_FLAGS has `slow`: a Run All runs them.
`#| gpu` cells always run: without a CUDA GPU each one says why it skips, with one it checks the GPU path."""
import os, sys
from pathlib import Path
import pytest

nbformat = pytest.importorskip('nbformat')
nbclient = pytest.importorskip('nbclient')
sys.path.insert(0, str(Path(__file__).resolve().parent))
from book import CHAPTERS as NOTEBOOKS, run_all  # the runner `make book` uses too (tests/book.py)

FLAGS = set(os.environ.get('NPM_NB_TEST_FLAGS', '').split()) | {'gpu'}
SKIP = {'slow', 'gpu'} - FLAGS


@pytest.mark.parametrize('nb', NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook(nb):
    try: run_all(nb, skip=SKIP)
    except nbclient.exceptions.CellExecutionError as e:
        pytest.fail(f'{nb.name} failed under Run All; `jupyter nbconvert --to notebook --execute nbs/{nb.name} --output '
                    f'/tmp/{nb.name}` shows the cell:\n{str(e)[-6000:]}', pytrace=False)


def test_run_all_runs_eval_false_cells(tmp_path):
    "Run All runs `#| eval: false` cells too (a `__main__` block that parses the kernel's arguments fails here), and skips slow ones."
    import nbformat.v4 as v4
    nb = v4.new_notebook(cells=[v4.new_code_cell("#| eval: false\nopen('ran.txt', 'w').write('yes')"),
                                v4.new_code_cell("#| slow\nopen('slow.txt', 'w').write('yes')")])
    nb.metadata['kernelspec'] = {'name': 'python3', 'display_name': 'Python 3', 'language': 'python'}
    p = tmp_path/'t.ipynb'; nbformat.write(nb, p)
    run_all(p, skip={'slow'})
    assert (tmp_path/'ran.txt').exists() and not (tmp_path/'slow.txt').exists()
    bad = v4.new_notebook(cells=[v4.new_code_cell("#| eval: false\nimport argparse\nif __name__ == '__main__': "
                                                   "argparse.ArgumentParser().parse_args()")])
    nbformat.write(bad, p)
    with pytest.raises(nbclient.exceptions.CellExecutionError): run_all(p)
