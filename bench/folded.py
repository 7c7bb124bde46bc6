"""Summarize a py-spy `-f raw` profile (collapsed stacks): the functions with the largest inclusive
and self share of samples. `python bench/folded.py FILE [--top N] [--match TEXT] [--main]`."""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

LINE = re.compile(r"^(.*) (\d+)$")
FRAME = re.compile(r"^(.*?) \((.*?)(?::\d+)?\)$")


def function_of(frame: str) -> str:
    """`consume (services/runtime/model/responses_api.py:70)` -> `responses_api.py:consume`."""
    m = FRAME.match(frame.strip())
    if m is None:
        return frame.strip()
    return f"{Path(m.group(2)).name}:{m.group(1)}"


def summarize(path: Path, main_only: bool = False) -> tuple[int, Counter[str], Counter[str]]:
    total = 0
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        m = LINE.match(line)
        if m is None:
            continue
        if main_only and "_bootstrap" in m.group(1).split(";", 1)[0]:
            continue  # a worker thread's stack (threading bootstrap): e.g. the transcript's fsyncs
        n = int(m.group(2))
        frames = [function_of(f) for f in m.group(1).split(";") if f]
        total += n
        for f in set(frames):
            inclusive[f] += n
        if frames:
            own[frames[-1]] += n
    return total, inclusive, own


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--match", default="", help="only functions whose name contains this")
    parser.add_argument("--main", action="store_true", help="the main thread (the event loop) only")
    args = parser.parse_args()
    total, inclusive, own = summarize(args.file, args.main)
    print(f"{args.file.name}: {total} samples")
    for title, counter in (("inclusive", inclusive), ("self", own)):
        print(f"-- {title}")
        rows = [(f, n) for f, n in counter.most_common() if args.match in f][: args.top]
        for f, n in rows:
            print(f"{100 * n / max(total, 1):5.1f}%  {f}")


if __name__ == "__main__":
    main()
