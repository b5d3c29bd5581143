#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""gen_trace.py — multi-turn conversation traces in the Mooncake format.

One JSON object per line, as `kvlink replay` reads them: timestamp (ms),
input_length, output_length, hash_ids (prefix-chained ids of 512-token
blocks), and session_id and turn (which the replay skips). The workload:

- sessions, each a conversation of several turns (geometric, --turns
  mean); a turn's input is the whole conversation so far (the system
  prompt, the document if any, every earlier question and answer) and its
  new question; its output becomes part of the next turn's input;
- a long tail of shared system prompts (--system-prompts of them, picked
  with Zipf popularity --zipf), so a few prefixes are shared by most
  sessions and many by few;
- documents asked about repeatedly (--docs of them, Zipf popularity; a
  session starts with one with probability --doc-share), after the system
  prompt;
- think time between a session's turns: --active sessions are open at
  once and each request comes from one of them at random, so a session's
  next turn comes about --active requests after its last (hundreds, with
  the default);
- arrivals at --rate requests per second (exponential gaps).

Block ids follow the prefix: equal ids mean equal blocks with equal
prefixes, as in Mooncake's traces; a last, partly filled block gets an id
of its own, which changes as the conversation grows. The same arguments
give the same trace. docs/replay.md lists the parameters and their
defaults.
"""

import argparse
import json
import math
import random
import sys


def zipf_picker(rng, n, s):
    """A function drawing 0..n-1 with P(k) proportional to 1/(k+1)^s."""
    weights = [1.0 / (k + 1) ** s for k in range(n)]
    total = sum(weights)
    cum, acc = [], 0.0
    for w in weights:
        acc += w / total
        cum.append(acc)

    def pick():
        u = rng.random()
        lo, hi = 0, n - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if cum[mid] < u:
                lo = mid + 1
            else:
                hi = mid
        return lo
    return pick


def lognormal_tokens(rng, mean, sigma=0.8, lo=1):
    """A token count with the given mean (lognormal spread)."""
    mu = math.log(mean) - sigma * sigma / 2
    return max(lo, int(rng.lognormvariate(mu, sigma)))


class Blocks:
    """Ids of prefix-chained blocks: a block is its parent's id and the
    pieces of segments it holds; equal chains get equal ids."""

    def __init__(self, block_tokens):
        self.bt = block_tokens
        self.ids = {}

    def chain(self, segments, length):
        """The ids of the blocks of the first `length` tokens of
        `segments` ((source, tokens) pairs)."""
        out, parent = [], -1
        pieces, filled, at = [], 0, 0
        for source, n in segments:
            off = 0
            while off < n and at < length:
                take = min(n - off, self.bt - filled, length - at)
                pieces.append((source, off, take))
                off += take
                filled += take
                at += take
                if filled == self.bt or at == length:
                    key = (parent, tuple(pieces))
                    parent = self.ids.setdefault(key, len(self.ids))
                    out.append(parent)
                    pieces, filled = [], 0
            if at == length:
                break
        return out


def generate(a, out):
    rng = random.Random(a.seed)
    sys_pick = zipf_picker(rng, a.system_prompts, a.zipf)
    doc_pick = zipf_picker(rng, a.docs, a.zipf)
    sys_len = [rng.randint(1, a.system_blocks) * a.block_tokens
               - rng.randrange(a.block_tokens)
               for _ in range(a.system_prompts)]
    doc_len = [lognormal_tokens(rng, a.doc_tokens) for _ in range(a.docs)]
    blocks = Blocks(a.block_tokens)
    started = done = 0
    active = []
    t_ms = 0.0

    def new_session():
        nonlocal started
        sid = started
        started += 1
        k = sys_pick()
        segs = [(("sys", k), sys_len[k])]
        if a.docs and rng.random() < a.doc_share:
            d = doc_pick()
            segs.append((("doc", d), doc_len[d]))
        turns = 1 + int(math.log(1 - rng.random()) /
                        math.log(1 - 1 / a.turns)) if a.turns > 1 else 1
        return {"id": sid, "segs": segs, "turn": 0, "turns": turns}

    while done < a.sessions:
        while len(active) < a.active and started < a.sessions:
            active.append(new_session())
        i = rng.randrange(len(active))
        s = active[i]
        sid, turn = s["id"], s["turn"]
        s["segs"].append((("q", sid, turn),
                          lognormal_tokens(rng, a.question_tokens)))
        n_in = sum(n for _, n in s["segs"])
        n_out = lognormal_tokens(rng, a.output_tokens)
        ids = blocks.chain(s["segs"], n_in)
        t_ms += rng.expovariate(a.rate) * 1000.0
        out.write(json.dumps({"timestamp": int(t_ms), "input_length": n_in,
                              "output_length": n_out, "hash_ids": ids,
                              "session_id": sid, "turn": turn}) + "\n")
        s["segs"].append((("a", sid, turn), n_out))
        s["turn"] += 1
        if s["turn"] == s["turns"]:
            active[i] = active[-1]
            active.pop()
            done += 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sessions", type=int, default=2000)
    ap.add_argument("--turns", type=float, default=6.0,
                    help="mean turns per session (geometric)")
    ap.add_argument("--active", type=int, default=200,
                    help="sessions open at once (think time in requests)")
    ap.add_argument("--system-prompts", type=int, default=100)
    ap.add_argument("--system-blocks", type=int, default=8,
                    help="longest system prompt, in blocks")
    ap.add_argument("--docs", type=int, default=300)
    ap.add_argument("--doc-share", type=float, default=0.3,
                    help="share of sessions that start with a document")
    ap.add_argument("--doc-tokens", type=int, default=6000)
    ap.add_argument("--zipf", type=float, default=1.1,
                    help="popularity skew of system prompts and documents")
    ap.add_argument("--question-tokens", type=int, default=300)
    ap.add_argument("--output-tokens", type=int, default=250)
    ap.add_argument("--rate", type=float, default=10.0,
                    help="requests per second")
    ap.add_argument("--block-tokens", type=int, default=512)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-o", "--output", help="file (default: stdout)")
    a = ap.parse_args(argv)
    for name in ("sessions", "active", "system_prompts", "system_blocks",
                 "question_tokens", "output_tokens", "block_tokens"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if a.turns < 1 or a.rate <= 0 or a.docs < 0 or a.doc_tokens < 1 \
            or not 0 <= a.doc_share <= 1 or a.zipf < 0:
        ap.error("--turns >= 1, --rate > 0, --docs >= 0, --doc-tokens >= 1, "
                 "--doc-share in [0, 1], --zipf >= 0")
    if a.output:
        with open(a.output, "w") as f:
            generate(a, f)
    else:
        generate(a, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
