"""`kdelay`: inspect and repair logs from the shell (the kafka-dump-log of kdelay).

    kdelay dump-log FILE.log [--print-data] [--offsets A..B] [--json]
    kdelay dump-index FILE.dlyindex|.index|.timeindex|.cancels|.cancelindex [--summary] [--json]
    kdelay verify DIR|FILE [--remote] [--json] [-q]
    kdelay rebuild-index DIR [--index-interval-bytes N]
    kdelay stats DIR [--now MS] [--json]
    kdelay compact DIR [--retention-ms MS] [--min-ratio R] [--json]
    kdelay demo ...

Exit status: 0 fine, 1 damage found (or the log is locked), 2 bad usage or input.
Everything but rebuild-index and compact only reads and takes no lock, so it is safe on a
live log.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import InspectError, KdelayError
from . import compact, remote_ops, serve
from .dump_index import cmd_dump_index
from .dump_log import cmd_dump_log
from .formatting import Out, err
from .rebuild_index import cmd_rebuild_index
from .stats import cmd_stats
from .verify import cmd_verify

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2


# ---------------------------------------------------------------------------- arguments


def parse_offsets(text: str) -> tuple[int | None, int | None]:
    """'A..B', 'A..', '..B' or 'A' (inclusive)."""
    try:
        if ".." in text:
            a, b = text.split("..", 1)
            lo = int(a) if a.strip() else None
            hi = int(b) if b.strip() else None
        else:
            lo = hi = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"bad offset range {text!r}: use A..B, A.., ..B or A") from None
    if (lo is not None and lo < 0) or (hi is not None and hi < 0) or (
            lo is not None and hi is not None and hi < lo):
        raise argparse.ArgumentTypeError(f"bad offset range {text!r}")
    return lo, hi


def non_negative_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text}")
    return v


def positive_int(text: str) -> int:
    v = non_negative_int(text)
    if v == 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return v



# ---------------------------------------------------------------------------- demo


def run_demo(argv: list[str]) -> int:
    try:
        from . import demo
    except ModuleNotFoundError as e:
        if e.name == f"{__package__}.demo":
            err(f"demo: not available in this installation ({e.name} is missing)")
            return EXIT_USAGE
        err(f"demo: needs the package {e.name!r}, which is not installed")
        return EXIT_USAGE
    rc = demo.main(argv)
    return rc if isinstance(rc, int) else EXIT_OK


# ---------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kdelay",
        description="Inspect, check, compact and repair kdelay logs. Everything except "
                    "rebuild-index and compact only reads and takes no lock: safe on a "
                    "live log.",
        epilog="exit status: 0 ok, 1 problems found (or log locked), 2 usage or input error")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    d = sub.add_parser("dump-log", help="print the batches (and records) of a .log file")
    d.add_argument("file", help="a segment's .log file")
    d.add_argument("--print-data", action="store_true", help="also print every record")
    d.add_argument("--offsets", type=parse_offsets, metavar="A..B",
                   help="only batches holding offsets A..B (inclusive; A.. and ..B work)")
    d.add_argument("--max-bytes", type=positive_int, default=64, metavar="N",
                   help="show at most N characters/bytes of each key and value (default 64)")
    d.add_argument("--json", action="store_true", help="one JSON object per batch per line")
    d.set_defaults(handler=cmd_dump_log)

    x = sub.add_parser("dump-index", help="print an index file (.dlyindex, .index, "
                       ".timeindex) or a cancellation file (.cancels, .cancelindex)")
    x.add_argument("file")
    x.add_argument("--summary", action="store_true",
                   help="only the header and whether the index is current for its .log")
    x.add_argument("--json", action="store_true",
                   help="one JSON object per entry per line (with --summary: the header)")
    x.set_defaults(handler=cmd_dump_index)

    v = sub.add_parser("verify", help="check CRCs, offset continuity and every index")
    v.add_argument("path", help="a partition directory, a topic directory, or one segment file")
    v.add_argument("--json", action="store_true", help="one JSON report")
    v.add_argument("--remote", action="store_true",
                   help="also check every remote copy (tiered storage) in the object store "
                        "the directory records: manifests, objects' sizes and CRCs, and the "
                        "copies' batches and indexes; orphan objects are notes")
    v.add_argument("-q", "--quiet", action="store_true",
                   help="print only the problems and a one-line verdict (no notes, no "
                        "progress bar)")
    v.set_defaults(handler=cmd_verify)

    r = sub.add_parser("rebuild-index",
                       help="rebuild every segment's indexes from its .log (takes the lock)")
    r.add_argument("dir")
    r.add_argument("--index-interval-bytes", type=positive_int, default=4096, metavar="N",
                   help="offset/time index sparsity, as LogConfig (default 4096)")
    r.set_defaults(handler=cmd_rebuild_index)

    s = sub.add_parser("stats", help="records, due/pending counts and a delivery forecast")
    s.add_argument("dir", nargs="?", help="a log or topic root (with --broker: a topic name, "
                                          "or none for every topic)")
    s.add_argument("--broker", metavar="URL",
                   help="ask a running broker's operations endpoint instead of reading files")
    s.add_argument("--user", help="SASL user for the endpoint (password: "
                                  "$KDELAY_BROKER_PASSWORD)")
    s.add_argument("--cafile", help="trust this PEM certificate for https")
    s.add_argument("--now", type=non_negative_int, metavar="MS",
                   help="the time to count from, ms since the epoch (default: wall clock)")
    s.add_argument("--json", action="store_true", help="one JSON object")
    s.set_defaults(handler=cmd_stats)

    compact.add_parser(sub, non_negative_int)
    serve.add_parser(sub)
    serve.add_sasl_user_parser(sub)
    remote_ops.add_parsers(sub, non_negative_int)

    sub.add_parser("demo", help="run the demo (options: kdelay demo --help)", add_help=False)
    # Spark commands (kdelay.spark; need the spark extra) parse their own options
    sub.add_parser("spark-verify", help="offline checks run in Spark (kdelay spark-verify --help)",
                   add_help=False)
    sub.add_parser("forecast", help="records coming due per time window, via Spark "
                                    "(kdelay forecast --help)", add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "demo":
        # the demo parses its own options; pass them through untouched
        return run_demo(argv[1:])
    if argv and argv[0] in ("spark-verify", "forecast"):
        from .. import spark as kspark  # imported lazily: pyspark is an optional extra

        run = kspark.cli_spark_verify if argv[0] == "spark-verify" else kspark.cli_forecast
        return run(argv[1:])
    args = build_parser().parse_args(argv)
    out = Out()
    try:
        rc = args.handler(args, out)
        sys.stdout.flush()
        return rc
    except InspectError as e:
        err(str(e))
        return EXIT_USAGE
    except KdelayError as e:  # damage (IndexUnreadable), a locked log (LogLockedError)
        err(str(e))
        return EXIT_PROBLEMS
    except BrokenPipeError:
        # the reader went away (`| head`): stop quietly, and keep Python's exit flush quiet
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_PROBLEMS
    except KeyboardInterrupt:
        sys.stderr.write("\n")
        return 130
    except OSError as e:
        err(f"{e.filename + ': ' if e.filename else ''}{e.strerror or e}")
        return EXIT_PROBLEMS
    except Exception as e:
        if os.environ.get("KDELAY_DEBUG"):
            raise
        err(f"internal error: {type(e).__name__}: {e} (set KDELAY_DEBUG=1 for a traceback)")
        return EXIT_PROBLEMS


if __name__ == "__main__":
    sys.exit(main())

