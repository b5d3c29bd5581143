# SPDX-License-Identifier: Apache-2.0
# tenant.py -- around docs/python.md's tenant fragment (tests/doc_snippets.py
# pastes it at the SNIPPET line below).
#
# A linker over a small host pool in which tenant A's prompt is stored,
# hashed in tenant A's namespace; the same tokens are also stored without a
# namespace under another request. The fragment's lookup must find exactly
# tenant A's pages: all of them.
import sys

import numpy as np
import kvlink as kvl

PS = 16
tokens = list(range(3, 3 + 4 * PS))
pool = np.arange(4 * 2 * 16 * PS * 8, dtype=np.uint16).reshape(4, 2, 16, PS, 8)
layout = kvl.Layout("snippet/u16", PS)
layout.add_kv_cache(pool, "LCP")
layout.finalize()
store = kvl.Store("mem:?capacity=64MiB")
lk = kvl.Linker(layout, store)
mine = kvl.hash_pages(tokens, PS, prior=kvl.namespace_seed("tenant-a"))
lk.offload(1, mine[:3], [0, 1, 2])        # 3 of tenant A's 4 pages
lk.offload(2, kvl.hash_pages(tokens, PS), [4, 5, 6, 7])  # no namespace
lk.flush()
done = lk.poll_until([1, 2])
assert all(c.status == 0 for c in done.values()), done

# @SNIPPET@

print("tenant A's lookup: %d pages" % hit)
ok = hit == 3 and list(pages) == list(mine)
if not ok:
    print("tenant.py: FAIL: expected tenant A's 3 stored pages, got %d" % hit)
sys.exit(0 if ok else 1)
