"""`python -m harness.data check PATH | synth --out DIR --seed N --size S | download --split S --out DIR`."""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from .longmemeval import QUESTION_TYPES, DataError, iter_raw, parse_record, sha256_file


def check(path: str) -> int:
    per_type: Counter[str] = Counter()
    abstention = sessions = turns = evidence = 0
    seen: set[str] = set()
    try:
        for index, rec in iter_raw(path):
            q = parse_record(rec, index)
            if q.qid in seen:
                raise DataError(index, q.qid, "question_id", "duplicate question id")
            seen.add(q.qid)
            per_type[q.qtype] += 1
            abstention += q.abstention
            sessions += len(q.sessions)
            turns += sum(len(s.turns) for s in q.sessions)
            evidence += len(q.evidence)
    except DataError as exc:
        print(f"INVALID {path}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"INVALID {path}: {exc}", file=sys.stderr)
        return 1
    total = sum(per_type.values())
    print(f"file        {path}")
    print(f"sha256      {sha256_file(path)}")
    print(f"questions   {total}")
    for t in QUESTION_TYPES:
        print(f"  {t:<27} {per_type[t]}")
    print(f"abstention  {abstention}")
    print(f"sessions    {sessions}  ({sessions / max(total, 1):.1f} per question)")
    print(f"turns       {turns}")
    print(f"evidence    {evidence} sessions")
    print("OK")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.data")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="validate a LongMemEval-format file and print its counts")
    c.add_argument("path")
    s = sub.add_parser("synth", help="write a generated benchmark file in the LongMemEval format")
    s.add_argument("--out", required=True)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--size", choices=["tiny", "s", "m"], default="tiny")
    d = sub.add_parser("download", help="fetch a cleaned LongMemEval file from the hub (needs internet)")
    d.add_argument("--split", choices=["s", "m", "oracle"], required=True)
    d.add_argument("--out", default="data/longmemeval")
    d.add_argument("--revision", default="main")
    args = ap.parse_args(argv)
    if args.cmd == "check":
        return check(args.path)
    if args.cmd == "synth":
        from .synth import write

        path = write(args.out, args.seed, args.size)
        print(path)
        return check(str(path))
    from .hub import download

    info = download(args.split, args.out, args.revision)
    print(info)
    return check(info["path"])


if __name__ == "__main__":
    sys.exit(main())
