"""``kubellm download MODEL``: put a hub model's files into the hub cache, with progress.

What the operator's loader Job runs to fill a model cache claim (HF_HUB_CACHE on the
claim): one line per finished file and a byte count every --progress-seconds, then a
summary line, also written to --summary-file (the Job passes /dev/termination-log, which
the operator shows in the LLMDeployment's status). Exits 1 with the reason on failure.
"""
from __future__ import annotations

import argparse
import sys


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "download", help="download a Hugging Face model into the hub cache",
        description="Download the files a model needs (config, safetensors, tokenizer) "
                    "into the Hugging Face hub cache (HF_HUB_CACHE), where `kubellm serve "
                    "MODEL` finds them, offline too (HF_HUB_OFFLINE=1).")
    p.add_argument("model", help="Hugging Face repository id, e.g. Qwen/Qwen2.5-0.5B-Instruct")
    p.add_argument("--revision", default=None, help="branch, tag or commit (default: main)")
    p.add_argument("--summary-file", default=None,
                   help="also write the summary (or the error) to this file")
    p.add_argument("--max-workers", type=int, default=4, help="files downloaded at once")
    p.add_argument("--progress-seconds", type=float, default=15.0,
                   help="seconds between two byte-count lines")
    p.set_defaults(func=run)


def _say(line: str) -> None:
    print(f"kubellm download: {line}", flush=True)


def run(args: argparse.Namespace) -> int:
    from kubellm.runtime.loading import hub

    if args.max_workers < 1 or args.progress_seconds <= 0:
        print("kubellm: error: --max-workers must be >= 1 and --progress-seconds > 0",
              file=sys.stderr)
        return 2
    try:
        summary = hub.download(args.model, args.revision, max_workers=args.max_workers,
                               progress_seconds=args.progress_seconds, say=_say)
    except Exception as exc:  # noqa: BLE001 (every failure becomes one readable line)
        message = hub.explain(exc, args.model, args.revision)
        _say(f"failed: {message}")
        _write(args.summary_file, message)
        return 1
    _say(f"done: {summary.line()}")
    _write(args.summary_file, summary.line())
    return 0


def _write(path: str | None, text: str) -> None:
    if not path:
        return
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text[:4000])  # the kubelet keeps at most 4096 bytes of it
    except OSError as exc:
        _say(f"could not write {path}: {exc}")
