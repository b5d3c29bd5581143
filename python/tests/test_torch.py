# SPDX-License-Identifier: Apache-2.0
"""Layouts and the linker over torch tensors (CPU): data pointers, strides,
element sizes (bf16 too), slots and tokens given as tensors. Skipped
without torch."""

import pytest

from conftest import LAYERS, PAGE_SIZE, np, tokens
import kvlink as kvl

torch = pytest.importorskip("torch")

T = 10.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torch_pool_round_trip(dtype):
    shape = (16, LAYERS, 2, PAGE_SIZE, 2, 8)  # [pages, layers, 2, …]: "PLC"
    g = torch.Generator().manual_seed(0)
    src = torch.randn(shape, generator=g).to(dtype)
    dst = torch.zeros(shape, dtype=dtype)
    with kvl.Store() as st:
        lays = []
        for pool in (src, dst):
            lay = kvl.Layout("pytest/torch", PAGE_SIZE)
            lay.add_kv_cache(pool, "PLC")
            lays.append(lay.finalize())
        info = lays[0].pool_info("kv")
        assert info.pages == 16 and info.layers == tuple(range(LAYERS))
        a, n = lays[0].page_pieces("kv", 3, 1)[1]
        assert a == src[3, 1, 1].data_ptr()
        assert n == PAGE_SIZE * 2 * 8 * src.element_size()
        with kvl.Linker(lays[0], st) as ls, kvl.Linker(lays[1], st) as ld:
            toks = torch.tensor(tokens(5))
            pages = kvl.hash_pages(toks, PAGE_SIZE)
            assert pages == kvl.hash_pages(toks.tolist(), PAGE_SIZE)
            ls.offload(1, pages, torch.arange(5))
            ls.flush(T)
            assert ls.poll_until([1], T)[1].ok
            assert ld.lookup(pages) == 5
            ld.load(2, pages, torch.tensor([9, 10, 11, 12, 13]))
            b = ld.start()
            for layer in range(LAYERS):
                ld.wait(b, layer, T)
            assert ld.poll_until([2], T)[2].ok
        assert torch.equal(dst[9:14], src[0:5])
        assert not dst[:9].any() and not dst[14:].to(torch.float32).any()


def test_tensor_views_and_errors():
    base = torch.zeros(LAYERS, 2, 8, PAGE_SIZE, 16)
    lay = kvl.Layout("pytest/torch", PAGE_SIZE)
    kv = lay.add_pool("kv")
    lay.add_array(kv, "k", 0, base[0, 0])  # a view: pointer of the view
    with pytest.raises(kvl.InvalidArgument, match="contiguous"):
        lay.add_array(kv, "v", 0, base[0, 1, :, :, :8])
    with pytest.raises(kvl.InvalidArgument, match="contiguous"):
        lay.add_array(kv, "v", 0, base[0, 1].transpose(1, 2))
    lay.add_array(kv, "v", 0, base[0, 1])
    lay.finalize()
    assert lay.page_pieces(kv, 2, 0)[0] == (base[0, 0, 2].data_ptr(),
                                            PAGE_SIZE * 16 * 4)


def test_store_buffers_from_tensors():
    with kvl.Store() as st:
        t = torch.arange(32, dtype=torch.int32)
        st.put("t", t)
        out = torch.zeros(32, dtype=torch.int32)
        st.get_into("t", out)
        assert torch.equal(out, t)
        assert np.array_equal(np.frombuffer(st.get("t", 128), np.int32),
                              t.numpy())
