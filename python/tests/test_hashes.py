# SPDX-License-Identifier: Apache-2.0
"""Page hashes and namespace seeds against an independent implementation
(hashlib), in every input and output form."""

import hashlib
import struct

import pytest

from conftest import np
import kvlink as kvl


def H(b):
    return hashlib.sha256(b).digest()


def ref_chain(toks, page_size, prior=b""):
    out, prev = [], prior
    for i in range(len(toks) // page_size):
        page = toks[i * page_size:(i + 1) * page_size]
        if any(t > 0xFFFFFFFF for t in page):
            prev = H(prev + b"\xff" + struct.pack(f"<{len(page)}Q", *page))
        else:
            prev = H(prev + struct.pack(f"<{len(page)}I", *page))
        out.append(prev)
    return out


def ref_seed(*salts):
    b = b"kvlink-namespace-v1"
    for s in salts:
        e = s.encode() if isinstance(s, str) else s
        b += struct.pack("<Q", len(e)) + e
    return H(b)


@pytest.mark.parametrize("page_size", [1, 3, 16])
def test_chain_matches_hashlib(page_size):
    toks = list(range(7, 7 + 50))
    got = kvl.hash_pages(toks, page_size)
    assert got == ref_chain(toks, page_size)
    assert all(isinstance(h, bytes) and len(h) == 32 for h in got)
    assert len(got) == 50 // page_size  # the partial page is ignored


def test_known_vector():
    # SHA-256 of u32 LE 1, 2: a fixed value, not only self-consistency.
    assert kvl.hash_hex(kvl.hash_pages([1, 2], 2)[0]) == \
        H(struct.pack("<2I", 1, 2)).hex()


def test_prior_and_seed():
    seed = kvl.namespace_seed("tenant-a")
    assert seed == ref_seed("tenant-a")
    assert kvl.namespace_seed("a", "b") == ref_seed("a", "b")
    assert kvl.namespace_seed("a", "b") != kvl.namespace_seed("b", "a")
    assert kvl.namespace_seed(b"raw") == ref_seed(b"raw")
    toks = list(range(32))
    assert kvl.hash_pages(toks, 8, prior=seed) == ref_chain(toks, 8, seed)
    assert kvl.hash_pages(toks, 8, prior=seed.hex()) == \
        ref_chain(toks, 8, seed)
    assert kvl.hash_pages(toks, 8, prior=seed) != kvl.hash_pages(toks, 8)


def test_large_token_ids():
    toks = [1, 2, 3, 2**32, 5, 6, 7, 8]
    assert kvl.hash_pages(toks, 4) == ref_chain(toks, 4)
    assert kvl.hash_pages([2**64 - 1] * 2, 2) == ref_chain([2**64 - 1] * 2, 2)


def test_numpy_in_and_out():
    toks = np.arange(100, 164, dtype=np.int64)
    want = ref_chain(toks.tolist(), 16)
    assert kvl.hash_pages(toks, 16) == want
    assert kvl.hash_pages(toks.astype(np.uint32), 16) == want
    assert kvl.hash_pages(toks[::2], 8) == ref_chain(toks[::2].tolist(), 8)
    arr = kvl.hash_pages(toks, 16, as_array=True)
    assert arr.dtype == np.uint8 and arr.shape == (4, 32)
    assert [bytes(r) for r in arr] == want
    assert kvl.hash_pages([], 4) == []
    assert kvl.hash_pages([1, 2, 3], 4, as_array=True).shape == (0, 32)


def test_hex_round_trip():
    h = kvl.hash_pages([9] * 4, 4)[0]
    text = kvl.hash_hex(h)
    assert text == h.hex() and len(text) == 64
    assert kvl.hash_from_hex(text.upper()) == h
    assert kvl.hash_hex(text.upper()) == text
    with pytest.raises(kvl.InvalidArgument, match="32 bytes"):
        kvl.hash_hex(b"short")


def test_errors():
    with pytest.raises(kvl.InvalidArgument, match="page_size"):
        kvl.hash_pages([1, 2], 0)
    with pytest.raises(ValueError, match="negative"):
        kvl.hash_pages(np.array([1, -2]), 1)
    with pytest.raises(ValueError):
        kvl.hash_pages([1, -2], 1)
    with pytest.raises(kvl.InvalidArgument, match="32 bytes"):
        kvl.hash_pages([1, 2], 1, prior=b"short")
    with pytest.raises(kvl.ParseError) as ei:
        kvl.hash_from_hex("zz" * 32)
    assert ei.value.code == kvl.ERRORS["KVL_EPARSE"]
    assert ei.value.name == "KVL_EPARSE"
    with pytest.raises(kvl.ParseError):
        kvl.hash_from_hex("ab")
    with pytest.raises(kvl.InvalidArgument):
        kvl.namespace_seed()
    with pytest.raises(kvl.InvalidArgument, match="NUL"):
        kvl.namespace_seed("a\0b")


# ---------------------------------------------------- SGLang's variants
# The expected values below were computed with hashlib from SGLang's
# definitions and checked against SGLang's own native hash module.

def ref_bigram_chain(toks, page_size, prior=b""):
    out, prev = [], prior
    for i in range((len(toks) - 1) // page_size if len(toks) > 1 else 0):
        words = [t for j in range(i * page_size, (i + 1) * page_size)
                 for t in toks[j:j + 2]]
        prev = H(prev + struct.pack(f"<{len(words)}I", *words))
        out.append(prev)
    return out


def ref_sglang_seed(extra_key, cache_salt):
    b = b"sglang-cache-namespace-v1"
    for p in (extra_key, cache_salt):
        if p is None:
            b += b"\x00"
        else:
            e = p.encode()
            b += b"\x01" + struct.pack("<Q", len(e)) + e
    return H(b)


@pytest.mark.parametrize("page_size", [1, 2, 4, 16])
def test_bigram_chain(page_size):
    rng = np.random.default_rng(page_size)
    toks = [int(t) for t in rng.integers(0, 2**32, 70)]
    got = kvl.hash_pages(toks, page_size, bigram=True)
    assert got == ref_bigram_chain(toks, page_size)
    assert len(got) == 69 // page_size
    # The tail from page 1 on, after page 0, continues the chain.
    if len(got) > 1:
        assert kvl.hash_pages(toks[page_size:], page_size, prior=got[0],
                              bigram=True) == got[1:]
    assert kvl.hash_pages(toks[:1], page_size, bigram=True) == []
    assert kvl.hash_pages([], page_size, bigram=True) == []


def test_sglang_vectors():
    assert kvl.hash_hex(kvl.hash_pages([10, 20, 30, 40, 50], 2,
                                       bigram=True)[1]) == \
        "453f4cce8becb03a18ae6afca746893db8ebe101f05db3e015ce4780acef5111"
    assert kvl.sglang_namespace_seed() is None
    assert kvl.sglang_namespace_seed(None, None) is None
    seed = kvl.sglang_namespace_seed("lora-1", "tenant-a")
    assert kvl.hash_hex(seed) == \
        "f0b3cb914ac096e548f62bd0afddd91b3d0013e436b850b1d1674f0cb60b03eb"
    assert [kvl.hash_hex(h) for h in
            kvl.hash_pages(list(range(1, 9)), 4, prior=seed)] == [
        "2a72504ed2593dd51c93384b5adfbdd9bda13d7170787542f3490277ff49ee69",
        "d3427329cb5dc53eb062f68b8e6d21355dca8df91d6b95cda845382fcae3d632"]


@pytest.mark.parametrize("parts", [("lora-1", None), (None, "tenant-a"),
                                   ("", None), (None, ""), ("", ""),
                                   ("a", "bc"), ("ab", "c"),
                                   ("\u00e9lan", "t\u00e9")])
def test_sglang_seed_matches_hashlib(parts):
    assert kvl.sglang_namespace_seed(*parts) == ref_sglang_seed(*parts)


def test_sglang_seed_errors():
    with pytest.raises(kvl.InvalidArgument, match="NUL"):
        kvl.sglang_namespace_seed("a\0b")
    with pytest.raises(TypeError, match="cache_salt"):
        kvl.sglang_namespace_seed(None, b"salt")
