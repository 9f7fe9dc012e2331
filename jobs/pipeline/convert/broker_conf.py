"""The broker config for a converted store (issue 37 item 1): written into OUT (the source config with its DLedger
keys dropped and every path key leading to OUT), and checked (`convert --check-config`). A config whose paths
lead elsewhere is what wiped a converted store's consume queues: 4.9.8 opened with the new root but DLedger's
storePathCommitLog found no commit log there and logged "The commitlog files are deleted, and delete the
consume queue files"."""
from __future__ import annotations

import os
import posixpath

from storage_format.java_props import parse_properties
from storage_format.settings import BrokerSettings

CONF_NAME = "reput-broker.conf"
DEFAULT_ROOT = "${user.home}/store"  # MessageStoreConfig.storePathRootDir when the config does not set it
# the store settings the broker must keep: without them it makes files of its default sizes (issue 37 item 3)
SIZE_KEYS = ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "maxHashSlotNum", "maxIndexNum")


def is_dledger_key(key: str) -> bool:
    """A DLedger setting (dLeger*, enableDLegerCommitLog, storePathDLedgerCommitLog): none has a place after it."""
    return "dleger" in key.lower() or "dledger" in key.lower()


def is_path_key(key: str) -> bool:
    """A setting naming where a store file lives (storePathRootDir, storePathCommitLog, storePathEpochFile, ...)."""
    return key.startswith("storePath") or key == "readOnlyCommitLogStorePaths"


def _escape(value: str) -> str:
    """A value as java.util.Properties reads it back (backslashes, a leading space, line breaks)."""
    value = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    value = "".join(c if ord(c) <= 0xFF else "".join(f"\\u{u:04x}" for u in _utf16(c)) for c in value)
    lead = {" ": "\\ ", "\t": "\\t", "\f": "\\f"}  # Properties drops leading whitespace unless escaped
    return lead[value[0]] + value[1:] if value[:1] in lead else value


def _utf16(c: str) -> list[int]:
    """The UTF-16 code units of one character (a surrogate pair above U+FFFF), as \\uXXXX escapes need them."""
    data = c.encode("utf-16-be")
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]


def converted_config(source_text: str | None, out_root: str, settings: BrokerSettings) -> str:
    """The config to start the broker on OUT with: the source's settings but the DLedger and path keys (each
    kept as a comment saying why), the root and commit log at OUT, DLedger off, the store's file sizes stated,
    and the keys of the two plain modes left for the operator to pick."""
    props = parse_properties(source_text) if source_text else {}
    sizes = {"mappedFileSizeCommitLog": settings.mapped_file_size_commitlog,
             "mappedFileSizeConsumeQueue": settings.mapped_file_size_consume_queue,
             "maxHashSlotNum": settings.max_hash_slot_num, "maxIndexNum": settings.max_index_num}
    lines = ["# Written by reput convert: the broker settings for this converted store. Start the broker with this",
             "# file (mqbroker -c), after choosing one of the modes at the end. Check an edited copy with",
             "#     reput convert --store <this store> --check-config <that file>", ""]
    for key, value in props.items():
        if key == "enableDLegerCommitLog" or (is_path_key(key) and key != "storePathDLedgerCommitLog"):
            lines.append(f"# replaced below: {key}={_escape(value)}")
        elif is_dledger_key(key):
            lines.append(f"# removed (DLedger mode only): {key}={_escape(value)}")
        elif key not in sizes:
            lines.append(f"{key}={_escape(value)}")
    lines += ["", "# the store: every path leads to it, DLedger off, its file sizes as the old broker had them",
              f"storePathRootDir={_escape(out_root)}", f"storePathCommitLog={_escape(posixpath.join(out_root, 'commitlog'))}",
              "enableDLegerCommitLog=false"]
    lines += [f"{key}={sizes[key]}" for key in SIZE_KEYS]
    lines += ["", "# the mode: uncomment the lines of one (each line is one setting)"]
    for name, keys in MODE_LINES:
        lines += [f"# {name}:"] + [f"#{key}={value}" for key, value in keys]
    return "\n".join(lines + [""])


PLACEHOLDER = "<host:port;...>"  # controllerAddr in the mode lines: the operator's controllers go there
# the two plain modes, as converted_config offers them: (what it is, its settings)
MODE_LINES = (("controller mode (5.x): the controllers elect the master", (("enableControllerMode", "true"),
                                                                          ("controllerAddr", PLACEHOLDER))),
              ("master-slave, this broker the master (SYNC_MASTER: a send waits for a slave)",
               (("brokerId", "0"), ("brokerRole", "ASYNC_MASTER"))))


def mode_of(settings: BrokerSettings, config_text: str) -> str:
    """The mode a broker started with this config (read as `settings`) runs in, as the broker decides it: controller
    mode when enableControllerMode is true (brokerId and brokerRole are then the controllers' to set), else
    master-slave with its brokerRole (default ASYNC_MASTER) and brokerId (default 0, the master)."""
    props = parse_properties(config_text)
    if settings.enable_controller_mode:
        addr = props.get("controllerAddr", "").strip()
        return (f"controller mode (enableControllerMode=true, controllerAddr={addr})" if addr else
                "controller mode (enableControllerMode=true; controllerAddr is not set)")
    broker_id = props.get("brokerId", "0").strip() or "0"
    who = "a slave" if settings.broker_role == "SLAVE" else "the master"
    return f"master-slave, {who} (brokerRole={settings.broker_role}, brokerId={broker_id})"


def store_root(given: str) -> str:
    """The path a broker on this machine would name the store by (an absolute local path; a URI's path)."""
    if "://" in given:
        return posixpath.normpath("/" + given.split("://", 1)[1].split("/", 1)[-1])
    return posixpath.normpath(os.path.abspath(given))


def config_problems(config_text: str, out_root: str) -> list[str]:
    """Why a broker started with this config would not open OUT as the converted store (empty: it would)."""
    props = parse_properties(config_text)
    root = props.get("storePathRootDir", "").strip()
    out = posixpath.normpath(out_root)
    problems = []
    if props.get("enableDLegerCommitLog", "").strip().lower() == "true":
        problems.append("enableDLegerCommitLog=true: the broker would read a DLedger log under dledger-*/, not "
                        "OUT's commitlog/")
    if not root:
        problems.append(f"storePathRootDir is not set: the broker would open {DEFAULT_ROOT}, not {out}")
    elif not _same_place(root, out):
        problems.append(f"storePathRootDir={root} is not the converted store {out}")
    commitlog = props.get("storePathCommitLog", "").strip()
    if commitlog and not _same_place(commitlog, posixpath.join(out, "commitlog")):
        problems.append(f"storePathCommitLog={commitlog} is not {posixpath.join(out, 'commitlog')}: the broker "
                        f"would open another commit log (or none) and delete OUT's consume queues past its end (\"The commitlog files "
                        f"are deleted, and delete the consume queue files\")")
    if props.get("controllerAddr", "").strip() == PLACEHOLDER:
        problems.append(f"controllerAddr={PLACEHOLDER} is the placeholder convert wrote: name your controllers")
    for key, value in props.items():
        path = value.strip()
        if key in ("storePathRootDir", "storePathCommitLog") or not is_path_key(key) or is_dledger_key(key) or not path:
            continue
        if key == "readOnlyCommitLogStorePaths" or not _inside(path, out):
            problems.append(f"{key}={path} lies outside the converted store {out}")
    return problems


def _same_place(a: str, b: str) -> bool:
    """Two paths name one directory: as written, or once symbolic links are resolved (the broker opens through them)."""
    return posixpath.normpath(a) == posixpath.normpath(b) or os.path.realpath(a) == os.path.realpath(b)


def _inside(path: str, root: str) -> bool:
    """`path` is `root` or lies below it, as written or once symbolic links are resolved."""
    return any((posixpath.normpath(p) + "/").startswith(posixpath.normpath(r) + "/")
               for p, r in ((path, root), (os.path.realpath(path), os.path.realpath(root))))
