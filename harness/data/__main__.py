"""`python -m harness.data check PATH | synth --out DIR --seed N --size S
| download --split S --out DIR | download --what bge --out data/models
| download --what evaluate_qa --out data/longmemeval
| personal --out FILE --n N --seed S | check-personal FILE`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
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


def check_personal(path: str) -> int:
    from .personal import TrialError, load, variety

    try:
        data = load(path)
    except (TrialError, OSError, ValueError, KeyError, TypeError) as exc:
        print(f"INVALID {path}: {exc}", file=sys.stderr)
        return 1
    v = variety(data["trials"])
    print(f"file        {path}")
    print(f"sha256      {sha256_file(path)}")
    print(f"trials      {data['n']}  (seed {data['seed']}, one user each)")
    print(f"profiles    {v['distinct_profiles']} distinct")
    print(f"tasks       {v['distinct_tasks']} distinct")
    print(f"jaccard     max {v['max_jaccard']:.3f}, mean {v['mean_jaccard']:.3f} over {v['pairs']} pairs")
    if v["near_copies"]:
        print(f"INVALID {path}: {v['near_copies']} pairs of trials share more than half of their facts",
              file=sys.stderr)
        return 1
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
    s.add_argument("--size", choices=["tiny", "xs", "s", "m"], default="tiny")
    d = sub.add_parser("download", help="fetch a cleaned LongMemEval file, the bge weights or the official judge "
                                        "prompts, pinned and hash-checked (needs internet)")
    d.add_argument("--what", choices=["longmemeval", "bge", "evaluate_qa"], default=None,
                   help="longmemeval (with --split; the default), bge (BAAI/bge-small-en-v1.5 into "
                        "<out>/bge-small-en-v1.5, default out data/models), evaluate_qa (LongMemEval's "
                        "src/evaluation/evaluate_qa.py into <out>/evaluate_qa.py, default out data/longmemeval); the "
                        "runtime's session_search texts are the installed runtime's own (make setup), never downloaded")
    d.add_argument("--split", choices=["s", "m", "oracle"], default=None)
    d.add_argument("--out", default=None)
    d.add_argument("--revision", default=None,
                   help="hub revision (longmemeval: main; bge: the pinned commit) or git commit (evaluate_qa: the "
                        "pinned one); a revision other than the pinned one "
                        "is trust-on-first-download")
    d.add_argument("--endpoint", default=None, help="hub base URL (default HF_ENDPOINT or https://huggingface.co)")
    d.add_argument("--base-url", default=None,
                   help="evaluate_qa: raw-file base URL "
                        "(default https://raw.githubusercontent.com)")
    pe = sub.add_parser("personal", help="write personalization trials (second seed paper) and check them")
    pe.add_argument("--out", default=None, help="default data/personal/personal_trials_n<N>_seed<S>.json")
    pe.add_argument("--n", type=int, default=150)
    pe.add_argument("--seed", type=int, default=0)
    cp = sub.add_parser("check-personal", help="validate a personalization trials file and print its variety")
    cp.add_argument("path")
    args = ap.parse_args(argv)
    if args.cmd == "personal":
        from .personal import default_path, write

        path = write(args.out or default_path("data/personal", args.n, args.seed), args.n, args.seed)
        print(path)
        return check_personal(str(path))
    if args.cmd == "check-personal":
        return check_personal(args.path)
    if args.cmd == "check":
        return check(args.path)
    if args.cmd == "synth":
        from .synth import write

        path = write(args.out, args.seed, args.size)
        print(path)
        return check(str(path))
    return download_cmd(ap, args)


def download_cmd(ap, args) -> int:
    import json

    from judge.prompts import download_official, official_status

    from .hub import ChecksumError, download, download_bge

    what = args.what or ("longmemeval" if args.split else None)
    if what is None:
        ap.error("download: give --split s|m|oracle, or --what bge|evaluate_qa")
    if what == "longmemeval" and not args.split:
        ap.error("download --what longmemeval needs --split s|m|oracle")
    out = Path(args.out or ("data/models" if what == "bge" else "data/longmemeval"))
    made = [p for p in [*reversed(out.absolute().parents), out.absolute()] if not p.exists()]
    try:
        if what == "longmemeval":
            info = download(args.split, args.out or "data/longmemeval", args.revision or "main", endpoint=args.endpoint)
            print(info)
            return check(info["path"])
        if what == "bge":
            from harness.memory.encoder import weights_status

            info = download_bge(args.out or "data/models", args.revision, endpoint=args.endpoint)
            print(json.dumps(info, indent=2))
            status = weights_status("bge", info["path"])
            print(status["detail"])
            return 0 if status["matches_pin"] or not info["pinned"] else 1
        info = download_official(args.out or "data/longmemeval", args.revision, base_url=args.base_url)
        print(json.dumps(info, indent=2))
        status = official_status(info["path"])
        print(status["detail"])
        return 0 if status["parses"] else 1
    except ChecksumError as exc:
        print(f"REFUSED {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - the host not reached (offline, refused, timed out): an environment failure
        from harness.failures import STOPPED

        for folder in reversed(made):  # the folders this command created, left empty by the failed download
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        print(f"error: download --what {what} failed ({type(exc).__name__}: {first}); it reads the internet (the "
              "Hugging Face Hub or GitHub, or --endpoint/--base-url); offline, copy the file into "
              f"{out} by hand (docs/agent-study.md). Nothing was written.", file=sys.stderr)
        return STOPPED


if __name__ == "__main__":
    sys.exit(main())
