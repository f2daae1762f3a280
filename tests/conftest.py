"""What the tests share: `raises`, the check that a call fails with a clear message (`from conftest import raises`), and
how `make test` spreads the files over two processes (pytest-xdist, `-n 2 --dist loadfile`)."""
import os, sys

import pytest

# The tests of one file run in one process, in order, as they would alone. Files that share a cache of the real data
# folder share a process, so that two processes never write the same checkpoint or datastore at once (its lock would
# refuse the second): the smoke batch trains the smoke profile's models (test_batch.py) that test_investigations.py
# reuses (it trains them when they are missing); the explorer's tests build and read the explorer's stores.
SHARED_PROCESS = {'test_batch.py': 'smoke-models', 'test_investigations.py': 'smoke-models',
                  'test_explorer_browser.py': 'explorer', 'test_serving.py': 'explorer',
                  'test_reliability_explorer.py': 'explorer'}


def pytest_xdist_make_scheduler(config, log):
    "With `--dist loadfile`: a file's tests in one process, and the files of `SHARED_PROCESS` with theirs."
    if config.getvalue('dist') != 'loadfile': return None
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            f = nodeid.split('::', 1)[0]
            return SHARED_PROCESS.get(f.rsplit('/', 1)[-1], f)
    return ByFile(config, log)


def raises(fn, *parts, exc=Exception):
    "Call `fn`; it must raise `exc` whose message holds every one of `parts` (a clear error); the message."
    with pytest.raises(exc) as e:
        fn()
    msg = str(e.value)
    for p in parts:
        assert p in msg, f"{p!r} not in: {msg}"
    return msg


def pytest_configure():
    "Each of n pytest-xdist processes (and what it starts: kernels, subprocesses) on its own 1/n of the cores."
    worker, n = os.environ.get('PYTEST_XDIST_WORKER'), int(os.environ.get('PYTEST_XDIST_WORKER_COUNT', '1'))
    if not worker or n < 2 or not hasattr(os, 'sched_setaffinity'): return
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < n: return
    mine = set(cores[int(worker.removeprefix('gw')) % n::n])
    os.sched_setaffinity(0, mine)
    os.environ['OMP_NUM_THREADS'] = os.environ['MKL_NUM_THREADS'] = str(len(mine))


@pytest.fixture(autouse=True)
def _threads_of_this_process():
    "Torch's thread count back to this process's cores before each test (a module may set 2 when it is imported)."
    if 'torch' in sys.modules and hasattr(os, 'sched_getaffinity'):
        sys.modules['torch'].set_num_threads(len(os.sched_getaffinity(0)))
    yield
