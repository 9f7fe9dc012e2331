"""The --store and --report a job is given, checked before Spark starts: a readable broker store whose settings and
layout reput implements (what the store gate refuses, by name), and a report that lies outside it."""
from __future__ import annotations

import argparse

from storage_format.dledger import peers_problem
from storage_format.settings import BrokerSettings

from ..runtime.failure import JobError
from .commit_marker import refuse_unfinished
from .fs import Location, location
from .paths import check_outside, same_or_inside
from .store_gate import check_log_place, log_dir, store_cq_layout, store_settings


def check_store(args: argparse.Namespace, settings: BrokerSettings) -> tuple[Location, BrokerSettings]:
    """The --store location, when it is a readable broker store (a commit-log directory: STORE/commitlog or
    the broker config's storePathCommitLog) whose settings and layout reput implements and not an unfinished
    reput output (commit_marker); and the settings to use (file sizes from disk when no broker config is
    given: store_gate.store_settings). A log outside the store is said on stderr and kept in `args.log_place` for
    the report; another store's is refused where the job reads the store's own files (store_gate.check_log_place).
    The consume queues' layout goes to `args.cq_layout` for the report."""
    store = location(args.store)
    try:
        refuse_unfinished(store)  # a reput output on object storage whose run never committed it
        settings = store_settings(store, settings, args.broker_config is not None, args.job)  # refusals by name first
        commitlog = log_dir(store, settings)
        found = commitlog.is_dir()
    except OSError as exc:
        raise JobError(f"cannot read the store {args.store}: {exc}") from None
    if not found:
        raise JobError(f"no RocketMQ store at {args.store}: {_missing_log(store, settings, commitlog)}")
    peers = peers_problem(settings.d_leger_peers, settings.d_leger_self_id) if settings.enable_dleger_commit_log \
        else None  # after the member's directory is found: a mistyped dLegerSelfId is named with the store's members
    if peers is not None:
        raise JobError(peers)
    _check_listable(commitlog)
    args.log_place = check_log_place(args.job, store, settings).to_dict()
    args.cq_layout = store_cq_layout(store, settings).to_dict()  # for the report: the layout, what it leaves unread
    return store, settings


def _missing_log(store: Location, settings: BrokerSettings, commitlog: Location) -> str:
    """Why the store has no commit log where the settings say, with what is there instead: a DLedger member's
    directory or commitlog/ given as the store (the root is wanted), the dledger-* members present."""
    from storage_format import dledger

    if store.name.startswith(dledger.DIR_PREFIX) and store.child(dledger.DATA_DIR).is_dir() or \
            store.name == "commitlog":
        return f"{store.uri} is a directory inside a store: use the store root, {store.parent.uri}"
    if settings.enable_dleger_commit_log:
        members = sorted(i.base_name for i in store.list() if i.type.name == "Directory"
                         and i.base_name.startswith(dledger.DIR_PREFIX)) if store.is_dir() else []
        there = f"; the store holds {', '.join(members)} (dLegerSelfId names the member)" if members else ""
        return (f"no DLedger data directory {commitlog.uri} (dLegerSelfId={settings.d_leger_self_id}"
                + (", storePathDLedgerCommitLog)" if settings.store_path_dledger_commit_log else ")") + there)
    if commitlog == store.child("commitlog"):
        return "no commitlog/ directory"
    return f"no commit-log directory {commitlog.uri} (storePathCommitLog)"


def _check_listable(loc: Location) -> None:
    try:
        loc.list()
    except OSError as exc:
        raise JobError(f"cannot read {loc.uri}: {getattr(exc, 'strerror', None) or exc}") from None


def check_report(args: argparse.Namespace, store: Location) -> Location | None:
    """The --report location, which must lie outside the store (the store is only read) and outside the directory
    the job publishes (--out; --since with --in-place): that holds the job's own report, and a file in it that
    reput's record of its files does not list makes the next --overwrite or --since refuse it."""
    if not getattr(args, "report", None):
        return None
    report = location(args.report)
    check_outside(store, report, "--report")
    published = [("--since", getattr(args, "since", None) if getattr(args, "in_place", False) else None),
                 ("--out", getattr(args, "out", None))]  # --since --in-place: OUT1 is the job's out
    for flag, path in published:
        if path and same_or_inside(report, location(path)):
            raise JobError(f"--report {report.uri} lies inside {flag} {path}, which the job publishes (its own report "
                           f"goes there); put --report outside it")
    return report
