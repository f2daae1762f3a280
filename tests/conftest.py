"""What the tests share: `raises`, the check that a call fails with a clear message (`from conftest import raises`)."""
import os, shutil, tempfile
from pathlib import Path
import pytest


def raises(fn, *parts, exc=Exception):
    "Call `fn`; it must raise `exc` whose message holds every one of `parts` (a clear error); the message."
    with pytest.raises(exc) as e:
        fn()
    msg = str(e.value)
    for p in parts:
        assert p in msg, f"{p!r} not in: {msg}"
    return msg


# `make test` runs the suite in two processes (pytest-xdist, `--dist loadgroup`): one at a time the tests keep about 1.1
# of 2 cores busy (kernel start-ups, subprocesses, a browser). Each process gets its own share of the cores
# (`pytest_configure`), so that two of them do not both start a thread per core and slow each other down; everything
# a test starts (notebook kernels, subprocesses) inherits it, and `set_threads(0)` counts it.
# Tests that read or write the smoke profile's shared caches under data/cache/ (its checkpoints, recipe runs and stores:
# the smoke batch trains what the investigations and the explorer then load) run in one process, in file order, as
# they would alone; every other test makes its own folders.
SHARED_CACHE = {'test_batch.py::test_smoke_batch', 'test_investigations.py', 'test_explorer_browser.py',
                'test_notebooks.py::test_notebook[21_batch]', 'test_notebooks.py::test_notebook[23_explorer]'}


# The chapters under test make their folders with `tempfile.mkdtemp()` (a reader's Run All keeps them to look at); a
# test run would leave about 300 MB of them behind each time, until the disk is full. So the run gets one temporary
# folder of its own (`TMPDIR`; the notebook kernels, subprocesses and xdist workers inherit it), removed at its end.
MIN_FREE_GB = 3  # what the tests write: about 1.8 GB (smoke caches, chapter folders); a fresh clone peaks at 12.2 GB with data and venv
_OWN_TMP = None


def _free_gb(path) -> float: return shutil.disk_usage(path).free / 2**30


def pytest_configure(config):
    """The run's own temporary folder (in the first process; xdist workers inherit it and make theirs inside), and a
    clear stop when the disk is too full to run the suite. Then, in an xdist worker: keep to this worker's share of the
    cores (worker i of n takes cores i, i + n, ...)."""
    global _OWN_TMP
    here = Path(__file__).resolve().parent.parent
    for where in (here, tempfile.gettempdir()):
        if (free := _free_gb(where)) < MIN_FREE_GB:
            raise pytest.UsageError(
                f"only {free:.1f} GB free on the disk of {where}; the tests need about {MIN_FREE_GB} GB "
                f"(the smoke profile's caches under data/cache/ and the chapters' temporary folders). Free some space "
                f"(old clones and their data/cache/, /tmp) or set TMPDIR to a disk with room.")
    _OWN_TMP = tempfile.mkdtemp(prefix='npm-nb-tests-')
    os.environ['TMPDIR'] = tempfile.tempdir = _OWN_TMP
    worker, n = os.environ.get('PYTEST_XDIST_WORKER'), int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1'))
    if not worker or n < 2 or not hasattr(os, 'sched_setaffinity'): return
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < n: return
    mine = cores[int(worker.removeprefix('gw')) % n::n]
    try: os.sched_setaffinity(0, mine)
    except OSError: return   # a sandbox that forbids it: the workers share every core
    os.environ['OMP_NUM_THREADS'] = str(len(mine))


def pytest_unconfigure(config):
    "Remove the run's temporary folder (and the chapters' folders in it)."
    if _OWN_TMP: shutil.rmtree(_OWN_TMP, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    "Put the tests that share the smoke profile's caches into one xdist group (one process)."
    for it in items:
        file, _, name = it.nodeid.rpartition('/')[2].partition('::')
        if file in SHARED_CACHE or f'{file}::{name}' in SHARED_CACHE:
            it.add_marker(pytest.mark.xdist_group('smoke-cache'))
