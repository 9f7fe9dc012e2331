"""What every job's command line shares: common flags, exit codes, the broker config read as the broker reads it,
and `run_main`, the one way a job ends (an exit status and at most one line on stderr). The store and the report a
job is given are checked by io.job_args.

Light to import (the store and settings modules, which bring numpy and pyarrow, are imported where they are
used): `reput`, `reput --help` and `reput --version` answer without loading them."""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from typing import TYPE_CHECKING, Callable, NoReturn, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jobs import __version__

from . import env, interrupt
from .failure import DEBUG_ENV, Interrupted, JobError, debug, one_line  # noqa: F401 (JobError: jobs import it here)

if TYPE_CHECKING:
    from storage_format.settings import BrokerSettings

EXIT_OK = 0
EXIT_FINDINGS = 1  # verify: inconsistencies found; query: no message found
EXIT_ERROR = 2  # could not run: bad input, bad flags, unreadable store
EXIT_INTERRUPTED = interrupt.EXIT_INTERRUPTED
EXIT_TERMINATED = interrupt.EXIT_TERMINATED
EXIT_STATUS_TEXT = ("exit status: 0 ok, 1 findings (verify) or none found (query), 2 could not run, "
                    "130 interrupted (Ctrl-C), 143 terminated (SIGTERM)")
LOG_LEVELS = ("off", "fatal", "error", "warn", "info", "debug", "trace")
# What is true of the output after an interrupt, per job (a recovery that writes into the store says what it left
# there instead: recover.interrupted, inplace.switch).
INTERRUPTED_NOTES = {"rebuild": "nothing published", "recover": "nothing published", "convert": "nothing published",
                     "catalog": "no records committed"}


def parser(job: str, description: str, *, json_help: str = "print the report as JSON instead of the summary",
           report: bool = True) -> argparse.ArgumentParser:
    """The job's argument parser with the flags every job has (--report where the job has a report)."""
    from storage_format.scan_plan import DEFAULT_SPLIT_SIZE

    p = argparse.ArgumentParser(prog=f"reput {job}", description=description,
                                epilog=f"{EXIT_STATUS_TEXT}. {DEBUG_ENV}=1 shows tracebacks and Spark's log.")
    p.set_defaults(job=job)  # the job's name, for the checks every job makes (io.job_args.check_store)
    p.add_argument("--version", action="version", version=f"reput {__version__}")
    p.add_argument("--store", required=True, help="the broker's store directory (storePathRootDir): a local path "
                                                  "or a URI")
    p.add_argument("--broker-config", metavar="FILE",
                   help="the broker's configuration file (the broker.conf given to `mqbroker -c`): file sizes, "
                        "index sizes and other store settings are read from it; settings it does not set, or "
                        "all of them without this flag, are the broker's defaults")
    p.add_argument("--split-size", type=_size, default=DEFAULT_SPLIT_SIZE,
                   help="bytes of commit log per decode task (e.g. 64m; default 128m; 0 = one per segment)")
    p.add_argument("--master", help="Spark master for the embedded session (default local[*]; ignored "
                                    "under spark-submit unless given)")
    p.add_argument("--json", action="store_true", help=json_help)
    if report:
        p.add_argument("--report", metavar="FILE", help="also write the report as JSON to FILE (outside the store)")
    p.add_argument("--quiet", action="store_true", help="no Spark start-up banner and no progress lines")
    p.add_argument("--log-level", type=str.lower, choices=LOG_LEVELS, metavar="LEVEL",
                   help=f"Spark's own log on stderr: {', '.join(LOG_LEVELS)} (default off; warn with {DEBUG_ENV}=1)")
    return p


def add_generation_flag(p: argparse.ArgumentParser) -> None:
    """--rocketmq-version: the generation whose rules apply where 4.x and 5.x differ (multi-dispatch)."""
    p.add_argument("--rocketmq-version", type=int, choices=(4, 5),
                   help="RocketMQ generation that wrote the store (default: detected from abort/abort.bak/checkpoint)")


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower()
    try:
        return int(t[:-1]) * units[t[-1]] if t and t[-1] in units else int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}") from None


def settings_from(args: argparse.Namespace) -> BrokerSettings:
    """The broker config as the broker reads it; a warning on stderr for every value the broker would ignore
    or read differently and every key it does not know."""
    from storage_format.settings import load_settings_with_warnings

    loaded = load_settings_with_warnings(args.broker_config)
    for warning in loaded.warnings:
        print(f"reput: warning: {args.broker_config}: {warning}", file=sys.stderr)
    return loaded.settings


def progress_quiet(args: argparse.Namespace) -> bool:
    """No progress lines on stderr: asked for (--quiet), or stdout is JSON for a script (--json)."""
    return bool(args.json or args.quiet)


def time_zone(flag: str, name: str) -> ZoneInfo:
    """A time zone flag's value, or a one-line error naming the flag."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise JobError(f"{flag} {name!r}: unknown time zone (an IANA name such as UTC or Asia/Shanghai)") from None


def warn(job: str, text: str) -> None:
    """A warning: one line on stderr, `reput <job>: warning: <text>` (stdout stays the report)."""
    print(f"reput {job}: warning: {text}", file=sys.stderr, flush=True)


def print_json(obj: object) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=False))


def json_bytes(obj: object) -> bytes:
    """A report as the bytes written to --report and to output directories."""
    return json.dumps(obj, indent=2, ensure_ascii=False).encode("utf-8")


class ReportFile(Protocol):
    """Where --report goes (an io.fs.Location, checked by io.job_args.check_report)."""

    def write_bytes(self, data: bytes) -> None: ...


def emit(args: argparse.Namespace, report: dict, human: Callable[[dict], None],
         report_loc: ReportFile | None = None) -> None:
    """Write the report to --report (when given) and print it: JSON with --json, else the summary."""
    if report_loc is not None:
        report_loc.write_bytes(json_bytes(report))
    if args.json:
        print_json(report)
    else:
        human(report)


def utf8_text(value: str) -> str:
    """An argument matched against a topic or key (argparse type): text the broker could have written, UTF-8. Bytes
    that do not decode (a terminal in another encoding) are refused naming the byte, not matched against nothing."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        byte = value[exc.start].encode("utf-8", "surrogateescape")[0]
        raise argparse.ArgumentTypeError(f"{value.encode('utf-8', 'surrogateescape')!r} is not UTF-8 (byte "
                                         f"0x{byte:02x} at character {exc.start}): the broker writes topics and keys "
                                         f"in UTF-8") from None
    return value


def run_main(job: str, main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> NoReturn:
    """Run `main(argv)` and exit with its status. A failure of any kind is one line,
    `reput <job>: error: <what>`, exit 2; Ctrl-C or SIGTERM is `reput <job>: interrupted; ...`, exit 130 or
    143 (see interrupt.py); REPUT_DEBUG=1 adds the traceback."""
    previous = interrupt.install()
    env.note_in_effect(job)
    try:
        code = main(argv)
    except KeyboardInterrupt as exc:
        note = exc.note if isinstance(exc, Interrupted) else interrupt.note_after(INTERRUPTED_NOTES.get(job))
        code = interrupt.finish(job, note)
    except SystemExit:
        raise  # argparse: --help / --version (0) or a usage error (2), already printed
    except Exception as exc:
        if isinstance(exc, BrokenPipeError) and _stdout_closed():  # `| head` read what it wanted: not an error
            code = _reader_gone()
        else:
            code = _failed(job, exc)
    finally:
        interrupt.uninstall(previous)
    sys.exit(code)


def _failed(job: str, exc: Exception) -> int:
    """A job's failure: one line (the traceback too with REPUT_DEBUG=1), or the interrupt it hid."""
    if debug():
        traceback.print_exc()
    if interrupt.signalled():  # the interrupt's KeyboardInterrupt was replaced on its way up
        return interrupt.finish(job, interrupt.note_after(INTERRUPTED_NOTES.get(job)))
    print(f"reput {job}: error: {one_line(exc)}", file=sys.stderr, flush=True)
    return EXIT_ERROR


EXIT_READER_GONE = 141  # 128 + SIGPIPE: what a shell reports for a program whose reader closed the pipe


def _stdout_closed() -> bool:
    """Standard output is a pipe whose reader has closed it (POLLERR on the write end)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def _reader_gone() -> int:
    """The reader of standard output went away (`| head`): nothing more can reach it, so the job ends quietly, as a
    program killed by SIGPIPE ends, its output pointed at /dev/null so that no later flush fails."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_READER_GONE


def run_process(job: str, main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> NoReturn:
    """run_main as a process's entry point: once the job has ended and its output is flushed, the process
    leaves at once instead of tearing the interpreter down (a quarter of a second after a Spark job, spent
    on nothing an operator waits for). The driver JVM ends itself when its pipe from this process closes
    (stopping Spark and its workers, as after any exit); no reput code needs atexit or finalizers."""
    try:
        run_main(job, main, argv)
    except SystemExit as exc:
        code = exc.code
    if isinstance(code, str):  # what the interpreter would print for sys.exit("...")
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a closed pipe (e.g. `| head`): nothing more can reach the reader
    interrupt.remove_exit_files()  # what the skipped teardown would have removed (the accumulator's socket)
    os._exit(code or 0)
