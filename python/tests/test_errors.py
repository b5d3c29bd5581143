# SPDX-License-Identifier: Apache-2.0
"""The error table and the version, as the loaded library reports them: the
table read at import (names, codes, messages), the exception class of every
code, and which library versions the bindings accept."""

import pickle

import pytest

import kvlink as kvl
from kvlink import _lib

# The classes and the codes they have always had (kvlink.h's KVL_ERRNO_MAP).
CLASSES = [
    ("KVL_EINVAL", -1, kvl.InvalidArgument, ValueError),
    ("KVL_ENOMEM", -2, kvl.OutOfMemory, MemoryError),
    ("KVL_ENOTFOUND", -3, kvl.NotFound, LookupError),
    ("KVL_ERANGE", -4, kvl.OutOfRange, ValueError),
    ("KVL_EEXIST", -5, kvl.AlreadyExists, None),
    ("KVL_EIO", -6, kvl.StoreIOError, None),
    ("KVL_ECORRUPT", -7, kvl.Corrupt, None),
    ("KVL_ETIMEDOUT", -8, kvl.Timeout, TimeoutError),
    ("KVL_ECANCELED", -9, kvl.Canceled, None),
    ("KVL_EFULL", -10, kvl.Full, None),
    ("KVL_ECLOSED", -11, kvl.Closed, None),
    ("KVL_ENOTSUP", -12, kvl.NotSupported, None),
    ("KVL_EPARSE", -13, kvl.ParseError, ValueError),
    ("KVL_ESTATE", -14, kvl.StateError, None),
]


def test_table_is_the_librarys():
    table = kvl.ERROR_TABLE
    assert [e.code for e in table] == list(range(-1, -len(table) - 1, -1))
    for e in table:
        assert e.name == kvl.err_name(e.code)
        assert e.message == kvl.strerror(e.code)
        assert e.message != "unknown error"
    assert len({e.name for e in table}) == len(table)
    # The table ends where the library says KVL_EUNKNOWN.
    assert kvl.err_name(-len(table) - 1) == "KVL_EUNKNOWN"
    assert kvl.ERRORS == {e.name: e.code for e in table}
    assert kvl.err_name(0) == "KVL_OK" and _lib.KVL_OK == 0


@pytest.mark.parametrize("name,code,cls,builtin", CLASSES)
def test_classes_keep_their_codes(name, code, cls, builtin):
    assert kvl.ERRORS[name] == code
    assert getattr(_lib, name) == code
    assert kvl.error_class(code) is cls
    e = cls(code)
    assert (e.code, e.name, e.message) == (code, name, kvl.strerror(code))
    assert str(e) == f"{name}: {kvl.strerror(code)}"
    assert isinstance(e, kvl.KvlinkError)
    if builtin is not None:
        assert isinstance(e, builtin)
    again = pickle.loads(pickle.dumps(cls(code, "why")))
    assert type(again) is cls and again.message == "why"


def test_unknown_codes():
    code = -len(kvl.ERROR_TABLE) - 1
    assert kvl.error_class(code) is kvl.KvlinkError
    e = kvl.KvlinkError(code)
    assert e.name == "KVL_EUNKNOWN" and e.message == "unknown error"


def test_version_is_the_librarys():
    assert kvl.__version__ == kvl.version() == \
        _lib.lib.kvl_version().decode()
    assert _lib.BOUND_VERSION == (0, 6)
    assert tuple(int(x) for x in kvl.__version__.split(".")[:2]) == \
        _lib.BOUND_VERSION


@pytest.mark.parametrize("version", ["0.6.0", "0.6.7"])
def test_versions_accepted(version):
    _lib.check_version(version)


@pytest.mark.parametrize("version,why", [
    ("0.5.0", "need 0.6.x"),   # before 1.0 a minor version breaks the API
    ("0.7.0", "need 0.6.x"),
    ("1.2.0", "need 0.6.x"),
    ("zero", "reports version"),
])
def test_versions_refused(version, why):
    with pytest.raises(ImportError, match=why):
        _lib.check_version(version, "libkvlink.so")
