# SPDX-License-Identifier: Apache-2.0
"""The binding against include/kvlink.h, the contract it mirrors: every
numeric #define and enum member equals _lib's constant of that name (and
_lib has no KVL_ constant the header lacks); the error table the library
reports is KVL_ERRNO_MAP; the library's version is the KVL_VERSION_* macros;
every KVL_API function has a prototype with the header's return and argument
types (and _lib declares none the header lacks); every record and the
all-reduce callback have the header's fields and types.

Skipped when the header is not there (an installed package, away from a
source checkout)."""

import ctypes
import os
import re

import pytest

import kvlink as kvl
from kvlink import _lib

HERE = os.path.dirname(os.path.abspath(__file__))
HEADER = os.path.normpath(os.path.join(HERE, "..", "..", "include",
                                       "kvlink.h"))
if not os.path.isfile(HEADER):
    pytest.skip(f"no kvlink.h at {HEADER} (not a source checkout)",
                allow_module_level=True)

SIZE_MAX = ctypes.c_size_t(-1).value
NAMED_VALUES = {"SIZE_MAX": SIZE_MAX, "UINT32_MAX": 0xFFFFFFFF}
# Macros whose value the binding asks the library for instead of copying.
NOT_MIRRORED = {"KVL_VERSION_MAJOR", "KVL_VERSION_MINOR",
                "KVL_VERSION_PATCH"}


def _read():
    with open(HEADER) as f:
        text = f.read()
    text = text.replace("\\\n", " ")  # join continued macro lines
    return text


def _strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


TEXT = _read()
CODE = _strip_comments(TEXT)
DIRECTIVES = [ln.strip() for ln in CODE.splitlines()
              if ln.strip().startswith("#")]
DECLS = "\n".join(ln for ln in CODE.splitlines()
                  if not ln.strip().startswith("#"))


def _number(s):
    """The value of an integer constant expression of the header, or None
    when it is not one (a struct literal, an attribute, …)."""
    s = s.strip()
    while s.startswith("(") and s.endswith(")"):
        s = s[1:-1].strip()
    if s in NAMED_VALUES:
        return NAMED_VALUES[s]
    m = re.fullmatch(r"(-?)\s*(0[xX][0-9a-fA-F]+|\d+)[uUlL]*", s)
    if not m:
        return None
    return int(m.group(1) + m.group(2), 0)


def header_defines():
    """{name: value} of the object-like numeric KVL_ macros."""
    out = {}
    for ln in DIRECTIVES:
        m = re.match(r"#\s*define\s+(KVL_\w+)\s+(.+)$", ln)
        if m and _number(m.group(2)) is not None:
            out[m.group(1)] = _number(m.group(2))
    return out


def header_enums():
    """{enum type: {member: value}} (implicit values counted on)."""
    out = {}
    for m in re.finditer(r"typedef\s+enum\s+\w*\s*\{(.*?)\}\s*(\w+)\s*;",
                         DECLS, re.S):
        members, nxt = {}, 0
        for item in m.group(1).split(","):
            item = item.strip()
            if not item or "KVL_ERRNO_MAP" in item:
                continue  # the error codes: see test_error_table
            mm = re.fullmatch(r"(KVL_\w+)\s*(?:=\s*(.+))?", item, re.S)
            assert mm, f"kvlink.h: enum {m.group(2)}: cannot read {item!r}"
            value = nxt if mm.group(2) is None else _number(mm.group(2))
            assert value is not None, f"kvlink.h: {item!r}"
            members[mm.group(1)] = value
            nxt = value + 1
        out[m.group(2)] = members
    return out


DEFINES = header_defines()
ENUMS = header_enums()
ENUM_TYPES = set(ENUMS) | {"kvl_errno"}


def test_header_was_read():
    # A parser that silently found nothing would pass everything below.
    assert {"KVL_HASH_BYTES", "KVL_KEY_MAX", "KVL_NO_SLOT",
            "KVL_ALL_LAYERS"} <= set(DEFINES)
    assert {"kvl_mem_kind", "kvl_hit_policy", "kvl_req_kind",
            "kvl_stats_format"} <= set(ENUMS)
    assert len(PROTOTYPES) > 50 and len(RECORDS) >= 9


def test_constants_match_the_header():
    want = {n: v for n, v in DEFINES.items() if n not in NOT_MIRRORED}
    for members in ENUMS.values():
        want.update(members)
    have = {n: v for n, v in vars(_lib).items()
            if n.startswith("KVL_") and isinstance(v, int) and
            n not in _lib.ERRNO}
    differ = {n: (have.get(n, "missing"), v) for n, v in want.items()
              if have.get(n) != v}
    extra = sorted(set(have) - set(want))
    assert not differ and not extra, (
        f"constants that differ, as (_lib, kvlink.h): {differ}; in _lib "
        f"but not in kvlink.h: {extra}")


def test_error_table():
    rows = re.findall(r'X\(\s*(\w+)\s*,\s*(-?\d+)\s*,\s*"([^"]*)"\s*\)',
                      TEXT[TEXT.index("#define KVL_ERRNO_MAP"):])
    assert rows, "kvlink.h: KVL_ERRNO_MAP not found"
    want = [("KVL_" + name, int(code), msg) for name, code, msg in rows]
    assert [tuple(e) for e in kvl.ERROR_TABLE] == want


def test_version_macros():
    parts = [DEFINES[f"KVL_VERSION_{p}"] for p in ("MAJOR", "MINOR", "PATCH")]
    assert kvl.__version__ == "%d.%d.%d" % tuple(parts)
    assert tuple(parts[:2]) == _lib.BOUND_VERSION


# ------------------------------------------------------------------ types

SCALARS = {"int": ctypes.c_int, "unsigned": ctypes.c_uint,
           "uint8_t": ctypes.c_uint8, "uint32_t": ctypes.c_uint32,
           "uint64_t": ctypes.c_uint64, "int64_t": ctypes.c_int64,
           "size_t": ctypes.c_size_t}


def ctype_of(base, stars, where):
    """The ctypes type _lib must use for C type ``base`` with ``stars``
    levels of pointer."""
    if base == "void":
        t = None if stars == 0 else ctypes.c_void_p
        stars = max(stars - 1, 0)
    elif base == "char":
        assert stars >= 1, f"{where}: a char by value"
        t, stars = ctypes.c_char_p, stars - 1
    elif base in SCALARS:
        t = SCALARS[base]
    elif base in ENUM_TYPES:
        t = ctypes.c_int  # enums are ints in the C ABI kvlink is built for
    elif hasattr(_lib, base):
        t = getattr(_lib, base)  # records, handles, the callback type
    else:
        raise AssertionError(f"{where}: unknown type {base!r}")
    for _ in range(stars):
        t = ctypes.POINTER(t)
    return t


def parse_type(decl, where):
    """(base type, pointer levels) of a declaration without its name."""
    words = [w for w in re.findall(r"\w+|\*", decl) if w != "const"]
    stars = words.count("*")
    base = " ".join(w for w in words if w != "*")
    return ctype_of(base, stars, where)


def header_prototypes():
    out = {}
    for m in re.finditer(r"KVL_API\s+([^;{]*?)\b(kvl_\w+)\s*\(([^)]*)\)\s*;",
                         DECLS, re.S):
        ret, name, params = m.groups()
        args = []
        params = params.strip()
        if params != "void":
            for i, p in enumerate(params.split(",")):
                pm = re.fullmatch(r"(.*?[\s*])(\w+)", p.strip(), re.S)
                assert pm, f"kvlink.h: {name}: parameter {p!r}"
                args.append(parse_type(pm.group(1), f"{name} arg {i}"))
        out[name] = (parse_type(ret, f"{name} result"), args)
    return out


PROTOTYPES = header_prototypes()


def test_every_function_is_declared():
    assert sorted(_lib._PROTOTYPES) == sorted(PROTOTYPES)


@pytest.mark.parametrize("name", sorted(PROTOTYPES))
def test_prototype(name):
    if name not in _lib._PROTOTYPES:
        pytest.fail(f"_lib has no prototype of {name}")
    restype, argtypes = _lib._PROTOTYPES[name]
    want_res, want_args = PROTOTYPES[name]
    assert restype is want_res, f"{name}: result"
    assert len(argtypes) == len(want_args), f"{name}: argument count"
    for i, (got, want) in enumerate(zip(argtypes, want_args)):
        assert got is want, f"{name}: argument {i}: {got} is not {want}"


def header_records():
    """{struct name: [(field, ctypes type)]}."""
    out = {}
    pattern = (r"(?:typedef\s+)?struct\s+(\w+)\s*\{(.*?)\}\s*(\w*)\s*;")
    for m in re.finditer(pattern, DECLS, re.S):
        name, body = m.group(1), m.group(2)
        fields = []
        for decl in body.split(";"):
            decl = " ".join(decl.split())
            if not decl:
                continue
            first, *more = decl.split(",")
            fm = re.fullmatch(r"(.+?)\s*((?:\*\s*)*)(\w+)\s*(?:\[(\w+)\])?",
                              first.strip())
            assert fm, f"kvlink.h: struct {name}: {decl!r}"
            base = fm.group(1)
            items = [(fm.group(2), fm.group(3), fm.group(4))]
            for d in more:
                dm = re.fullmatch(r"((?:\*\s*)*)(\w+)\s*(?:\[(\w+)\])?",
                                  d.strip())
                assert dm, f"kvlink.h: struct {name}: {d!r}"
                items.append(dm.groups())
            for stars, field, length in items:
                t = parse_type(f"{base} {stars}", f"{name}.{field}")
                if length:
                    n = DEFINES.get(length, _number(length))
                    t = t * n
                fields.append((field, t))
        out[name] = fields
    return out


RECORDS = header_records()


def _same(a, b):
    if hasattr(a, "_length_") and hasattr(b, "_length_"):
        return a._type_ is b._type_ and a._length_ == b._length_
    return a is b


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_record(name):
    cls = getattr(_lib, name, None)
    assert cls is not None, f"_lib has no record {name}"
    got = list(cls._fields_)
    want = RECORDS[name]
    assert [f for f, _ in got] == [f for f, _ in want], f"{name}: fields"
    for (field, g), (_, w) in zip(got, want):
        assert _same(g, w), f"{name}.{field}: {g} is not {w}"


def test_allreduce_callback_type():
    m = re.search(r"typedef\s+(\w+)\s*\(\s*\*\s*kvl_allreduce_fn\s*\)"
                  r"\s*\(([^)]*)\)\s*;", DECLS)
    assert m, "kvlink.h: kvl_allreduce_fn not found"
    want_args = [parse_type(re.fullmatch(r"(.*?[\s*])\w+", p.strip())
                            .group(1), f"kvl_allreduce_fn arg {i}")
                 for i, p in enumerate(m.group(2).split(","))]
    fn = _lib.kvl_allreduce_fn
    assert fn._restype_ is parse_type(m.group(1), "kvl_allreduce_fn")
    assert list(fn._argtypes_) == want_args
