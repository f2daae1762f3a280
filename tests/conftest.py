"""What the tests share: `raises`, the check that a call fails with a clear message (`from conftest import raises`), and
how `make test` spreads the files over two processes (pytest-xdist, `-n 2 --dist loadgroup`)."""
import pytest

# The tests of one file run in one process, in order, as they would alone. The files that train the smoke profile's
# models (test_batch.py's smoke batch) or reuse them (test_investigations.py trains them when they are missing) share
# one process, so that two processes never train the same checkpoint at once.
SHARED_PROCESS = {'test_batch.py': 'smoke-models', 'test_investigations.py': 'smoke-models'}


def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(pytest.mark.xdist_group(SHARED_PROCESS.get(item.path.name, item.path.name)))


def raises(fn, *parts, exc=Exception):
    "Call `fn`; it must raise `exc` whose message holds every one of `parts` (a clear error); the message."
    with pytest.raises(exc) as e:
        fn()
    msg = str(e.value)
    for p in parts:
        assert p in msg, f"{p!r} not in: {msg}"
    return msg
