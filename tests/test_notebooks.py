"""Run every chapter in nbs/ as a user's Run All in Jupyter would: a real kernel (nbclient, as `jupyter nbconvert --execute`),
every cell top to bottom, `#| eval: false` cells included. One test per chapter; this one run is also the chapter's test
(its asserts), so CI executes each chapter once.

`#| slow` cells (a minute or more each on a loaded 2-core CPU, or a download; each chapter says how long) are left out
unless NPM_NB_TEST_FLAGS has `slow`: a Run All runs them.
`#| gpu` cells always run: without a CUDA GPU each one says why it skips, with one it checks the GPU path."""
import os, re, sys
from pathlib import Path
import pytest

nbformat = pytest.importorskip('nbformat')
nbclient = pytest.importorskip('nbclient')

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(p for p in (ROOT/'nbs').glob('*.ipynb') if not p.name.startswith('_'))
FLAGS = set(os.environ.get('NPM_NB_TEST_FLAGS', '').split()) | {'gpu'}
SKIP = {'slow', 'gpu'} - FLAGS
CELL_TIMEOUT = 1800  # seconds for one cell


def flags(source: str) -> set:
    "The `#| flag` lines of a cell (`#| slow`, `#| gpu`); `#| eval: false` is no flag here: Run All runs it."
    return {m for m in re.findall(r'^#\|\s*(\w+)\s*$', source, re.M)}


def run_all(path: Path, skip: set = SKIP, timeout: int = CELL_TIMEOUT):
    "Execute the notebook at `path` in a fresh kernel from its folder, as Run All does; cells with a flag in `skip` print why they skip."
    nb = nbformat.read(path, as_version=4)
    for c in nb.cells:
        if c.cell_type == 'code' and (f := flags(c.source) & skip):
            c.source = f"print('skipped: a #| {sorted(f)[0]} cell (NPM_NB_TEST_FLAGS={sorted(f)[0]} runs it)')"
    env_before = os.environ.get('IN_TEST')
    os.environ['IN_TEST'] = '1'  # as nbdev_test sets it; the kernel inherits the environment
    try:
        client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name='python3', allow_errors=False,
                                         resources={'metadata': {'path': str(path.parent)}})
        client.execute()
    finally:
        if env_before is None: os.environ.pop('IN_TEST', None)
        else: os.environ['IN_TEST'] = env_before
    return nb


@pytest.mark.parametrize('nb', NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook(nb):
    try: run_all(nb)
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
