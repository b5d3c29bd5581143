# SPDX-License-Identifier: Apache-2.0
# engine.py -- the engine around the minimal engine loops of README.md and
# docs/python.md (fragments: tests/doc_snippets.py pastes each at the
# SNIPPET line below).
#
# It defines what the loops assume (a prompt's tokens, the slots its pages
# were prefilled into, free slots for the next request, request ids and a
# forward pass), fills the prefilled slots of the pool the loop registers,
# and checks afterwards that the loop did what it says: the prompt's pages
# were offloaded, the lookup found all of them, the load restored them into
# the free slots, and both requests completed once with status 0.
import sys

import numpy as np
import kvlink as kvl

prompt_tokens = [1000 + 7 * i for i in range(100)]   # 6 whole pages of 16
slots = slots_of_request = [0, 1, 2, 3, 4, 5]
free_slots = [100, 101, 102, 103, 104, 105, 106, 107]
req_id, other_id = 1, 2
layers_run = []


def run_layer(layer):
    layers_run.append(layer)


# The pool the loop registers gets data in the prefilled slots; what the
# loop offloads, loads and polls is recorded.
pools, offloads, loads, seen = [], [], [], []
_add_kv_cache, _offload = kvl.Layout.add_kv_cache, kvl.Linker.offload
_load, _poll = kvl.Linker.load, kvl.Linker.poll


def add_kv_cache(self, array, dims="LCP", **kw):
    assert dims == "LCP", dims
    rng = np.random.default_rng(5)
    part = array[:, :, slots]
    array[:, :, slots] = rng.standard_normal(part.shape).astype(array.dtype)
    pools.append(array)
    return _add_kv_cache(self, array, dims, **kw)


def offload(self, id, pages, slots, **kw):
    offloads.append((id, len(pages)))
    return _offload(self, id, pages, slots, **kw)


def load(self, id, pages, slots):
    loads.append((id, len(pages)))
    return _load(self, id, pages, slots)


def poll(self, *a, **kw):
    got = _poll(self, *a, **kw)
    seen.extend(got)
    return got


kvl.Layout.add_kv_cache, kvl.Linker.offload = add_kv_cache, offload
kvl.Linker.load, kvl.Linker.poll = load, poll

# @SNIPPET@

fails = []
ids = [i for i, _ in offloads + loads]
got = {c.id: c for c in seen}
for c in _poll(lk, 64, 0):
    got[c.id] = c
missing = [i for i in ids if i not in got]
if missing:
    got.update(lk.poll_until(missing, timeout=60))
if offloads != [(req_id, 6)]:
    fails.append("offloads %r, expected one of 6 pages" % offloads)
if [n for _, n in loads] != [6]:
    fails.append("loads %r: the lookup did not find the 6 offloaded pages"
                 % loads)
if layers_run != list(range(32)):
    fails.append("layers run: %r" % layers_run)
for i in ids:
    c = got.get(i)
    print("completion:", c)
    if c is None or c.status != 0 or c.valid_pages != 6:
        fails.append("request %d: %r" % (i, c))
if len(pools) == 1 and loads:
    p = pools[0]
    if not np.array_equal(p[:, :, free_slots[:6]], p[:, :, slots]):
        fails.append("the loaded slots differ from the offloaded ones")
for f in fails:
    print("engine.py: FAIL:", f)
sys.exit(1 if fails else 0)
