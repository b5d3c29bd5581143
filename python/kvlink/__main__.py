# SPDX-License-Identifier: Apache-2.0
"""python -m kvlink: what this installation is, and a store's counters.

  python -m kvlink [info]                      version, library, features
  python -m kvlink stat --store URI [--format text|json|prometheus]

The C tool (``kvlink``, built beside the library) does more (hash, bench,
replay); this needs only the package. Exit 0, 1 when the store cannot be
opened, 2 for a bad command line.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional

import kvlink as kvl

FEATURES = ("cuda", "cuda-device", "redis", "tls", "mac")


def _info() -> int:
    print(f"kvlink {kvl.version()}")
    print(f"library  {kvl.library_path}")
    have = [f for f in FEATURES if kvl.has_feature(f)]
    print(f"features {' '.join(have) if have else '(none)'}")
    return 0


def _stat(uri: str, fmt: str) -> int:
    try:
        store = kvl.Store(uri)
    except kvl.KvlinkError as e:
        print(f"python -m kvlink stat: store '{kvl.redact_uri(uri)}': {e}",
              file=sys.stderr)
        return 1
    with store:
        if fmt == "text":
            print(f"store {kvl.redact_uri(uri)}")
            for name, value in store.stats().items():
                print(f"  {name:<16} "
                      f"{'unknown' if value is None else value}")
            if store.note:
                print(f"  note             {store.note}")
        elif fmt == "json":
            print(json.dumps(store.stats_json()))
        else:
            sys.stdout.write(store.render_stats("prometheus"))
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kvlink",
                                 description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command")
    sub.add_parser("info", help="version, library and features")
    st = sub.add_parser("stat", help="a store's counters")
    st.add_argument("--store", required=True, help="the store's URI")
    st.add_argument("--format", default="text",
                    choices=("text", "json", "prometheus"))
    args = ap.parse_args(argv)
    if args.command == "stat":
        return _stat(args.store, args.format)
    return _info()


if __name__ == "__main__":
    sys.exit(main())
