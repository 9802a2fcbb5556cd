"""`python -m harness.cli.publish runs=PATH[,PATH] out=DIR [...]` — what `make publish` calls.

Writes the stage folders (a stage folder, or a folder of labels: a sweep family) as one
dataset in the Hugging Face Hub's layout (analysis/publish.py), after listing what leaves
the machine. `make analyze RUNS=DIR` re-analyses it; `datasets.load_dataset(DIR, NAME)` loads
a table.

Arguments (key=value):
  runs=PATH[,PATH]          stage folders to publish (required)
  out=DIR                   the dataset folder (required; new, empty, or one this command wrote)
  private_transcripts=true  include the text of runs whose context held a private agent's unit (answers,
                            golds, transcripts, tool arguments, judge prompts and replies; left out by default)
  dry_run=true              list what would leave the machine and stop
  push=OWNER/NAME           then upload it to the Hub as a private dataset repository (needs a token:
                            HF_TOKEN or `huggingface-cli login`, and internet); an existing repository's
                            visibility is read first and a public one refused
  public=true               push to (or create) a public repository instead
  endpoint=URL              the Hub's address for push (default: huggingface_hub's, HF_ENDPOINT)

Exit codes: 0 written; 2 bad arguments, a folder this cannot publish, an unreadable one, something
that still looks private after redaction (named), or a public repository without public=true; 3 the
push failed (the message says what happened and what the Hub holds now).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from harness.failures import announce


class PublishArgs(ValueError):
    exit_code = 2  # harness.failures.BAD_INPUT


def _flag(opts: dict, key: str) -> bool:
    value = str(opts.get(key, "false")).lower()
    if value not in ("true", "false"):
        raise PublishArgs(f"{key} must be true or false, got {opts[key]!r}")
    return value == "true"


def parse_args(argv: Sequence[str]) -> dict:
    opts: dict = {"runs": []}
    for a in argv:
        if a in ("-h", "--help", "help"):
            print(__doc__)
            sys.exit(0)
        key, eq, value = a.partition("=")
        if not eq or key not in ("runs", "out", "private_transcripts", "dry_run", "push", "endpoint",
                                             "public"):
            raise PublishArgs(f"unknown argument {a!r}; see python -m harness.cli.publish --help")
        if key == "runs":
            opts["runs"] += [v for v in value.split(",") if v]
        else:
            opts[key] = value
    if not opts["runs"]:
        raise PublishArgs("runs=PATH is required: the stage folder(s) to publish")
    if not opts.get("out") and not _flag(opts, "dry_run"):
        raise PublishArgs("out=DIR is required: the folder the dataset is written to")
    return opts


def main(argv: Sequence[str] | None = None) -> int:
    from analysis import publish as P

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        opts = parse_args(argv)
        P.publish(opts["runs"], opts.get("out") or "", private_transcripts=_flag(opts, "private_transcripts"),
                  dry_run=_flag(opts, "dry_run"))
        if opts.get("push") and not _flag(opts, "dry_run"):
            print("pushed: " + P.push(opts["out"], opts["push"], endpoint=opts.get("endpoint") or None,
                                      public=_flag(opts, "public")))
    except Exception as exc:  # ours carry an exit code (announce); anything else is a bug and raises
        code = announce(exc)
        if code is None:
            raise
        return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
