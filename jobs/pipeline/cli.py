"""What every job's command line shares: common flags, exit codes, clean error messages."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Callable

from storage_format.errors import SettingsError, StoreFormatError
from storage_format.scan_plan import DEFAULT_SPLIT_SIZE
from storage_format.settings import BrokerSettings, load_settings_with_warnings

EXIT_OK = 0
EXIT_FINDINGS = 1  # verify: inconsistencies found
EXIT_ERROR = 2  # could not run: bad input, bad flags, unreadable store


class JobError(Exception):
    """An error an operator can act on; printed as one line, exit status 2."""


def parser(job: str, description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m jobs.{job}", description=description)
    p.add_argument("--store", required=True, help="broker store directory (storePathRootDir), local path or URI")
    p.add_argument("--broker-config", help="broker .properties file (e.g. a golden case's broker.conf); "
                                           "defaults to the broker's defaults")
    p.add_argument("--split-size", type=_size, default=DEFAULT_SPLIT_SIZE,
                   help="bytes of commit log per decode task (e.g. 64m; default 128m; 0 = one per segment)")
    p.add_argument("--master", help="Spark master for the embedded session (default local[*]; ignored "
                                    "under spark-submit unless given)")
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
    loaded = load_settings_with_warnings(args.broker_config)
    for warning in loaded.warnings:
        print(f"reput: warning: {args.broker_config}: {warning}", file=sys.stderr)
    return loaded.settings


def run_main(job: str, main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> None:
    """Run a job's main and exit with its status; known errors become one clear line, exit 2."""
    try:
        code = main(argv)
    except (StoreFormatError, SettingsError, JobError, OSError) as exc:
        print(f"reput {job}: error: {exc}", file=sys.stderr)
        code = EXIT_ERROR
    except _scan_error() as exc:
        print(f"reput {job}: error: {exc}", file=sys.stderr)
        code = EXIT_ERROR
    sys.exit(code)


def _scan_error() -> type[Exception]:
    from .scan import ScanError
    return ScanError


def print_json(obj: object) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=False))
