# SPDX-License-Identifier: Apache-2.0
"""kvlink's own messages reach Python's logging (kvlink.log): a store whose
breaker opens is a warning on the "kvlink" logger naming the store, its
recovery an info; the library's threshold filters and is set by name or
logging level; bad levels are refused."""

import logging
import time

import pytest

import kvlink as kvl
from kvlink import _lib

URI = "fault+mem:?breaker=1&breaker_ms=10&fault.down=1"
# The first get call fails whole: the breaker opens, and its prober, whose
# calls succeed, closes it again.
ONCE = "fault+mem:?breaker=1&breaker_ms=10&fault.fail_get_call=1"


@pytest.fixture(autouse=True)
def restore_level():
    before = kvl.log.level()
    yield
    kvl.log.set_level(before)


def fail_once(store):
    with pytest.raises(kvl.StoreIOError):
        store.get("k", 8)


def test_breaker_is_logged(caplog):
    kvl.log.set_level("info")
    caplog.set_level(logging.DEBUG, logger="kvlink")
    with kvl.Store(ONCE) as st:
        fail_once(st)
        down = [r for r in caplog.records if "is down" in r.getMessage()]
        assert down and down[0].levelno == logging.WARNING
        assert down[0].name == "kvlink"
        assert down[0].kvlink_component == "store"
        assert "fault+mem:" in down[0].getMessage()
        for _ in range(200):
            if any("answers again" in r.getMessage()
                   for r in caplog.records):
                break
            time.sleep(0.01)
        back = [r for r in caplog.records
                if "answers again" in r.getMessage()]
        assert back and back[0].levelno == logging.INFO


def test_threshold(caplog):
    caplog.set_level(logging.DEBUG, logger="kvlink")
    kvl.log.set_level(logging.ERROR)
    assert kvl.log.level() == "error"
    with kvl.Store(URI) as st:
        fail_once(st)
    assert not [r for r in caplog.records if "is down" in r.getMessage()]
    kvl.log.set_level("OFF")
    assert kvl.log.level() == "off"
    kvl.log.set_level(logging.DEBUG)
    assert kvl.log.level() == "debug"


@pytest.mark.parametrize("bad", ["loud", True, 1.5, None])
def test_bad_level(bad):
    with pytest.raises(ValueError, match="not a level"):
        kvl.log.set_level(bad)


def test_c_refuses_a_bad_level():
    for bad in (4, -2):
        assert _lib.lib.kvl_log_set(kvl.log._sink, None, bad) == \
            _lib.KVL_EINVAL
