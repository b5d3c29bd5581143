#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""policy_sim.py — eviction policies replayed over Mooncake-format traces.

A simulator of the embedded store's eviction, block by block, with the
accesses `kvlink replay` makes (docs/replay.md): each request's lookup
touches every present block of the request, the offload touches them again
and stores the absent ones in order, evicting the policy's victim whenever
the store is full. The hit is the longest present prefix at lookup.

It carries two of the store's policies (`lru`, `slru`: the same rules as
src/store/evict.c; with --kvlink the simulated counts are checked against
`kvlink replay`'s, exactly, and the store's policies are replayed beside
them) and the published ones they are judged against: ARC, S3-FIFO, SIEVE
and LIRS. Capacity is in blocks.

    policy_sim.py [--policy P,...] [--sweep CAP,...] [--partial-blocks]
                  [--kvlink PATH] [--json | --markdown] TRACE...
"""
import argparse
import collections
import json
import subprocess
import sys

BLOCK_TOKENS = 512


def read_trace(path):
    reqs = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                o = json.loads(line)
                reqs.append((o["hash_ids"], o["input_length"]))
    return reqs


class Ghost:
    """The store's ghost (kvl__ghost): hashes in first-in, first-out order;
    a superseded or taken entry keeps its position until it ages out."""

    def __init__(self):
        self.ring = collections.deque()
        self.seq = {}
        self.tail = 0

    def add(self, h, limit):
        self.seq[h] = self.tail
        self.ring.append((h, self.tail))
        self.tail += 1
        while len(self.ring) > limit:
            old, s = self.ring.popleft()
            if self.seq.get(old) == s:
                del self.seq[old]

    def take(self, h):
        return self.seq.pop(h, None) is not None

    def __len__(self):
        return len(self.seq)


class LRU:
    def __init__(self, cap):
        self.cap, self.d, self.evictions = cap, collections.OrderedDict(), 0

    def __contains__(self, b):
        return b in self.d

    def hit(self, b):
        self.d.move_to_end(b)

    def insert(self, b):
        if len(self.d) >= self.cap:
            self.d.popitem(last=False)
            self.evictions += 1
        self.d[b] = None


class SLRU:
    """evict.c's slru: probation and protected (at most `share` of the
    capacity), a ghost of 2 x capacity keys evicted from probation."""

    def __init__(self, cap, share=None):
        self.cap = cap
        self.prot_max = cap - cap // 10 if share is None else int(cap * share)
        self.prob = collections.OrderedDict()
        self.prot = collections.OrderedDict()
        self.ghost = Ghost()
        self.evictions = 0

    def __contains__(self, b):
        return b in self.prob or b in self.prot

    def protect(self, b):
        self.prot[b] = None
        while len(self.prot) > self.prot_max:
            d, _ = self.prot.popitem(last=False)
            self.prob[d] = None

    def hit(self, b):
        if b in self.prot:
            self.prot.move_to_end(b)
        else:
            del self.prob[b]
            self.protect(b)

    def insert(self, b):
        if len(self.prob) + len(self.prot) >= self.cap:
            if self.prob:
                v, _ = self.prob.popitem(last=False)
                self.ghost.add(v, 2 * self.cap)
            else:
                self.prot.popitem(last=False)
            self.evictions += 1
        if self.ghost.take(b):
            self.protect(b)
        else:
            self.prob[b] = None


class ARC:
    """Megiddo and Modha, FAST 2003."""

    def __init__(self, cap):
        self.c, self.p = cap, 0.0
        self.t1, self.t2 = collections.OrderedDict(), collections.OrderedDict()
        self.b1, self.b2 = collections.OrderedDict(), collections.OrderedDict()
        self.evictions = 0

    def __contains__(self, b):
        return b in self.t1 or b in self.t2

    def hit(self, b):
        if b in self.t1:
            del self.t1[b]
        else:
            del self.t2[b]
        self.t2[b] = None

    def replace(self, in_b2):
        if self.t1 and (len(self.t1) > self.p or
                        (in_b2 and len(self.t1) == self.p)):
            v, _ = self.t1.popitem(last=False)
            self.b1[v] = None
        else:
            v, _ = self.t2.popitem(last=False)
            self.b2[v] = None
        self.evictions += 1

    def insert(self, b):
        c = self.c
        if b in self.b1:
            self.p = min(c, self.p + max(len(self.b2) / len(self.b1), 1))
            self.replace(False)
            del self.b1[b]
            self.t2[b] = None
            return
        if b in self.b2:
            self.p = max(0, self.p - max(len(self.b1) / len(self.b2), 1))
            self.replace(True)
            del self.b2[b]
            self.t2[b] = None
            return
        l1 = len(self.t1) + len(self.b1)
        total = l1 + len(self.t2) + len(self.b2)
        if l1 >= c:
            if len(self.t1) < c:
                self.b1.popitem(last=False)
                self.replace(False)
            else:
                self.t1.popitem(last=False)
                self.evictions += 1
        elif total >= c:
            if total >= 2 * c:
                self.b2.popitem(last=False)
            if len(self.t1) + len(self.t2) >= c:
                self.replace(False)
        self.t1[b] = None


class S3FIFO:
    """Yang et al., SOSP 2023: a small FIFO of 10 %, a main FIFO, a ghost
    FIFO as long as the main one; frequencies up to 3."""

    def __init__(self, cap, small=0.1):
        self.cap = cap
        self.s_max = max(1, int(cap * small))
        self.s, self.m = collections.OrderedDict(), collections.OrderedDict()
        self.freq = {}
        self.g = Ghost()
        self.evictions = 0

    def __contains__(self, b):
        return b in self.freq

    def hit(self, b):
        self.freq[b] = min(self.freq[b] + 1, 3)

    def evict_m(self):
        while True:
            v, _ = self.m.popitem(last=False)
            if self.freq[v] > 0:
                self.freq[v] -= 1
                self.m[v] = None
            else:
                del self.freq[v]
                self.evictions += 1
                return

    def evict_s(self):
        while self.s:
            v, _ = self.s.popitem(last=False)
            if self.freq[v] > 1:
                self.freq[v] = 0
                self.m[v] = None
                if len(self.m) > self.cap - self.s_max:
                    self.evict_m()
                    if len(self.freq) < self.cap:
                        return
            else:
                self.g.add(v, self.cap - self.s_max)
                del self.freq[v]
                self.evictions += 1
                return

    def insert(self, b):
        while len(self.freq) >= self.cap:
            if len(self.s) >= self.s_max or not self.m:
                self.evict_s()
            else:
                self.evict_m()
        self.freq[b] = 0
        if self.g.take(b):
            self.m[b] = None
        else:
            self.s[b] = None


class SIEVE:
    """Zhang et al., NSDI 2024: a FIFO with a visited bit and a hand that
    moves from old to new, clearing bits, and evicts the first unvisited."""

    def __init__(self, cap):
        self.cap = cap
        self.newer, self.older = {}, {}
        self.visited = {}
        self.head = self.tail = self.hand = None  # newest, oldest
        self.evictions = 0

    def __contains__(self, b):
        return b in self.visited

    def hit(self, b):
        self.visited[b] = True

    def remove(self, b):
        n, o = self.newer.pop(b), self.older.pop(b)
        if n is None:
            self.head = o
        else:
            self.older[n] = o
        if o is None:
            self.tail = n
        else:
            self.newer[o] = n
        del self.visited[b]

    def insert(self, b):
        if len(self.visited) >= self.cap:
            h = self.hand if self.hand is not None else self.tail
            while self.visited[h]:
                self.visited[h] = False
                h = self.newer[h]
                if h is None:
                    h = self.tail
            self.hand = self.newer[h]
            self.remove(h)
            self.evictions += 1
        self.newer[b], self.older[b] = None, self.head
        if self.head is not None:
            self.newer[self.head] = b
        else:
            self.tail = b
        self.head = b
        self.visited[b] = False


class LIRS:
    """Jiang and Zhang, SIGMETRICS 2002: 1 % of the capacity (at least
    one block) for resident HIR blocks; the stack keeps at most 2 x the
    capacity of non-resident entries (the oldest go first)."""

    LIR, HIR, NONRES = 0, 1, 2

    def __init__(self, cap, hir=0.01):
        self.cap = cap
        self.hir_max = max(1, int(cap * hir))
        self.lir_max = cap - self.hir_max
        self.s = collections.OrderedDict()  # the stack: bottom first
        self.q = collections.OrderedDict()  # resident HIR: front first
        self.state = {}  # every block in s or q
        self.nonres = collections.OrderedDict()
        self.n_lir = 0
        self.evictions = 0

    def __contains__(self, b):
        st = self.state.get(b)
        return st is not None and st != self.NONRES

    def prune(self):
        while self.s:
            b = next(iter(self.s))
            if self.state[b] == self.LIR:
                return
            del self.s[b]
            if self.state[b] == self.NONRES:
                del self.state[b]
                del self.nonres[b]

    def demote_bottom(self):
        b, _ = self.s.popitem(last=False)
        self.state[b] = self.HIR
        self.q[b] = None
        self.n_lir -= 1
        self.prune()

    def to_top(self, b):
        self.s.pop(b, None)
        self.s[b] = None

    def to_lir(self, b):
        """A HIR block with a recency in the stack becomes LIR; the bottom
        LIR block becomes HIR."""
        self.to_top(b)
        self.state[b] = self.LIR
        self.n_lir += 1
        self.demote_bottom()

    def hit(self, b):
        if self.state[b] == self.LIR:
            bottom = next(iter(self.s)) == b
            self.to_top(b)
            if bottom:
                self.prune()
            return
        del self.q[b]  # resident HIR
        if b in self.s:
            self.to_lir(b)
        else:
            self.to_top(b)
            self.q[b] = None

    def insert(self, b):
        if self.n_lir < self.lir_max and b not in self.s:
            self.s[b] = None
            self.state[b] = self.LIR
            self.n_lir += 1
            return
        if self.n_lir + len(self.q) >= self.cap:
            v, _ = self.q.popitem(last=False)
            self.evictions += 1
            if v in self.s:
                self.state[v] = self.NONRES
                self.nonres[v] = None
                if len(self.nonres) > 2 * self.cap:
                    old, _ = self.nonres.popitem(last=False)
                    del self.s[old]
                    del self.state[old]
            else:
                del self.state[v]
        if self.state.get(b) == self.NONRES:
            del self.nonres[b]
            self.to_lir(b)
        else:
            self.to_top(b)
            self.state[b] = self.HIR
            self.q[b] = None


POLICIES = {"lru": LRU, "slru": SLRU, "arc": ARC, "s3fifo": S3FIFO,
            "sieve": SIEVE, "lirs": LIRS}


def replay(reqs, policy, partial=False):
    """The accesses of `kvlink replay` (whole blocks only unless partial),
    through `policy`; the same counts as its JSON."""
    hit_tokens = in_tokens = hit_blocks = blocks = 0
    for ids, input_length in reqs:
        if not partial:
            ids = ids[:input_length // BLOCK_TOKENS]
        present = [b in policy for b in ids]
        for b, p in zip(ids, present):
            if p:
                policy.hit(b)
        hit = 0
        while hit < len(ids) and present[hit]:
            hit += 1
        hit_blocks += hit
        blocks += len(ids)
        hit_tokens += min(hit * BLOCK_TOKENS, input_length)
        in_tokens += input_length
        absent = []
        for b in ids:
            if b in policy:
                policy.hit(b)
            else:
                absent.append(b)
        for b in absent:
            if b not in policy:
                policy.insert(b)
    return {"token_hit_ratio": hit_tokens / in_tokens if in_tokens else 0,
            "block_hit_ratio": hit_blocks / blocks if blocks else 0,
            "hit_tokens": hit_tokens, "hit_blocks": hit_blocks,
            "evictions": policy.evictions}


REFERENCES = ("arc", "s3fifo", "sieve", "lirs")


def store_runs(kvlink, path, caps, partial):
    """kvlink replay's JSON for the store's policies: {(policy, cap): run}."""
    cmd = [kvlink, "replay", "--json", "--no-progress", "--sweep",
           ",".join(str(c) for c in caps)]
    if partial:
        cmd.append("--partial-blocks")
    out = subprocess.run(cmd + [path], check=True, capture_output=True,
                         text=True).stdout
    runs = {}
    for line in out.splitlines():
        o = json.loads(line)
        runs[(o["policy"], o["capacity_blocks"])] = o
    return runs


def markdown(path, caps, cols, ratio):
    """A table of token hit ratios (%); for the store's default, its margin
    over max(lru, the best reference - 0.5 points)."""
    print("\n%s\n" % path)
    print("| capacity | " + " | ".join(cols) + " | default's margin |")
    print("| ---: |" + " ---: |" * (len(cols) + 1))
    for c in caps:
        cells = ["%.2f" % ratio[(n, c)] for n in cols]
        margin = ""
        if ("kvlink:adaptive", c) in ratio:
            need = max([ratio[("lru", c)]] +
                       [ratio[(n, c)] - 0.5 for n in REFERENCES
                        if (n, c) in ratio])
            margin = "%+.2f" % (ratio[("kvlink:adaptive", c)] - need)
        print("| %d | %s | %s |" % (c, " | ".join(cells), margin))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default=",".join(POLICIES))
    ap.add_argument("--sweep", default="500,1000,2000,4000,8000,16000,40000")
    ap.add_argument("--partial-blocks", action="store_true",
                    help="every hash_id, as kvlink replay --partial-blocks")
    ap.add_argument("--kvlink", metavar="PATH",
                    help="also replay the store's policies with this "
                         "kvlink, and check that the simulated lru and "
                         "slru give its hit counts exactly")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("traces", nargs="+")
    a = ap.parse_args()
    names = a.policy.split(",")
    for n in names:
        if n not in POLICIES:
            sys.exit("policy_sim.py: unknown policy %r (known: %s)" %
                     (n, ", ".join(POLICIES)))
    caps = [int(c) for c in a.sweep.split(",")]
    bad = 0
    for path in a.traces:
        reqs = read_trace(path)
        ratio, cols = {}, list(names)
        store = store_runs(a.kvlink, path, caps, a.partial_blocks) \
            if a.kvlink else {}
        for (p, c), o in sorted(store.items()):
            ratio[("kvlink:" + p, c)] = 100 * o["token_hit_ratio"]
            if "kvlink:" + p not in cols:
                cols.append("kvlink:" + p)
        for cap in caps:
            for n in names:
                r = replay(reqs, POLICIES[n](cap), a.partial_blocks)
                ratio[(n, cap)] = 100 * r["token_hit_ratio"]
                o = store.get((n, cap))
                if o and (o["hit_tokens"], o["hit_blocks"]) != \
                        (r["hit_tokens"], r["hit_blocks"]):
                    print("policy_sim.py: %s at %d blocks: simulated %s "
                          "hits %d tokens, kvlink replay %d" % (
                              path, cap, n, r["hit_tokens"],
                              o["hit_tokens"]), file=sys.stderr)
                    bad = 1
                if a.json:
                    print(json.dumps(dict(trace=path, policy=n,
                                          capacity_blocks=cap, **r)))
                elif not a.markdown:
                    print("%-40s %7d  %-8s %7.2f %%" % (
                        path[-40:], cap, n, ratio[(n, cap)]))
                sys.stdout.flush()
        if a.markdown:
            markdown(path, caps, cols, ratio)
    return bad


if __name__ == "__main__":
    sys.exit(main())
