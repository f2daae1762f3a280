"""What the tests share: `raises`, the check that a call fails with a clear message (`from conftest import raises`)."""
import pytest


def raises(fn, *parts, exc=Exception):
    "Call `fn`; it must raise `exc` whose message holds every one of `parts` (a clear error); the message."
    with pytest.raises(exc) as e:
        fn()
    msg = str(e.value)
    for p in parts:
        assert p in msg, f"{p!r} not in: {msg}"
    return msg
