"""What the tests share: `raises`, the check that a call fails with a clear message (`from conftest import raises`)."""
import os
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


def pytest_configure(config):
    "In an xdist worker: keep to this worker's share of the cores (worker i of n takes cores i, i + n, ...)."
    worker, n = os.environ.get('PYTEST_XDIST_WORKER'), int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1'))
    if not worker or n < 2 or not hasattr(os, 'sched_setaffinity'): return
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < n: return
    mine = cores[int(worker.removeprefix('gw')) % n::n]
    try: os.sched_setaffinity(0, mine)
    except OSError: return   # a sandbox that forbids it: the workers share every core
    os.environ['OMP_NUM_THREADS'] = str(len(mine))


def pytest_collection_modifyitems(config, items):
    "Put the tests that share the smoke profile's caches into one xdist group (one process)."
    for it in items:
        file, _, name = it.nodeid.rpartition('/')[2].partition('::')
        if file in SHARED_CACHE or f'{file}::{name}' in SHARED_CACHE:
            it.add_marker(pytest.mark.xdist_group('smoke-cache'))
