#!/usr/bin/env python3
"""Summarize py-spy ``--format raw`` (collapsed stacks) output: where does kgw spend its time?

    .venv/bin/python bench/profile_summary.py /tmp/kgw-prof/produce.txt [--top 25] [--all]

Prints, as a share of all non-idle samples:

* *self* time per function (the leaf frame), kgw code and third-party code;
* *inclusive* time per kgw function (gateway/, protocol/, authz/, configs/),
  i.e. the function or anything it called was on the stack;
* *leaf by kgw caller*: the leaf frame attributed to the innermost kgw frame
  below it, e.g. ``send_all (trio/_highlevel_socket.py) <- _flush (gateway/connection/client.py)``.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter

KGW_DIRS = ("gateway/", "protocol/", "authz/", "configs/")
_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def _short(path: str) -> str:
    for marker in ("site-packages/", "/lib/python3.11/", "/work/main/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def parse_frame(frame: str) -> tuple[str, str]:
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip(), ""
    return m.group("func"), _short(m.group("file"))


def is_kgw(file: str) -> bool:
    return file.startswith(KGW_DIRS)


def summarize(path: str, top: int, show_all: bool) -> str:
    total = 0
    self_time: Counter = Counter()
    incl: Counter = Counter()
    by_caller: Counter = Counter()
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            stack, _, count = line.rpartition(" ")
            n = int(count)
            frames = [parse_frame(fr) for fr in stack.split(";")]
            frames = [fr for fr in frames if not fr[0].startswith(("process ", "thread "))]
            if not frames:
                continue
            total += n
            leaf = frames[-1]
            self_time[leaf] += n
            seen = set()
            for fr in frames:
                if is_kgw(fr[1]) and fr not in seen:
                    seen.add(fr)
                    incl[fr] += n
            caller = next((fr for fr in reversed(frames) if is_kgw(fr[1])), None)
            if caller is not None and caller != leaf:
                by_caller[(leaf, caller)] += n
    if not total:
        return f"{path}: no samples"
    pct = lambda n: f"{100.0 * n / total:5.1f}%"  # noqa: E731
    out = [f"{path}: {total} non-idle samples", "", "self time (leaf frame):"]
    for (func, file), n in self_time.most_common(top):
        out.append(f"  {pct(n)}  {func} ({file})")
    out += ["", "inclusive time, kgw functions:"]
    for (func, file), n in incl.most_common(top):
        out.append(f"  {pct(n)}  {func} ({file})")
    out += ["", "leaf <- innermost kgw caller:"]
    for ((lf, lfile), (cf, cfile)), n in by_caller.most_common(top):
        out.append(f"  {pct(n)}  {lf} ({lfile}) <- {cf} ({cfile})")
    if show_all:
        out += ["", "self time, kgw functions only:"]
        for (func, file), n in self_time.most_common():
            if is_kgw(file):
                out.append(f"  {pct(n)}  {func} ({file})")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--all", action="store_true", help="also list self time of every kgw function")
    args = ap.parse_args(argv)
    for i, path in enumerate(args.files):
        if i:
            print()
        print(summarize(path, args.top, args.all))
    return 0


if __name__ == "__main__":
    sys.exit(main())
