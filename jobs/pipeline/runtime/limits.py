"""The open-file limit a job needs, checked before its engine starts. reput keeps a bounded number of files open
whatever the store holds: a build task writes one consume-queue or index file at a time, work files are read one
at a time and their mappings let go. The broker keeps every consume-queue file of the store open (a 50,000-queue
store needs more than 50,000 descriptors). What reput needs is its JVM's (the jars, sockets: 331 at the peak of a
rebuild of a 12,000-queue store) and a few per Python process (10): OPEN_FILES_NEEDED leaves three times that."""
from __future__ import annotations

import resource

from .failure import JobError

OPEN_FILES_NEEDED = 1024


def ensure_open_files(needed: int = OPEN_FILES_NEEDED) -> str | None:
    """Raise this process's soft open-file limit to `needed` when the hard limit allows (the JVM and the workers
    inherit it); a note saying so, None when it already sufficed. JobError naming the limit and how to raise it
    when the hard limit is below `needed`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return None
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise JobError(f"the open-file limit (RLIMIT_NOFILE) is {soft}, at most {hard}; reput needs {needed} "
                       f"descriptors (its JVM holds about 350 at the peak, however many queues the store has): raise "
                       f"it with `ulimit -n {needed}` in the shell or cron entry, LimitNOFILE={needed} in a systemd "
                       f"unit, or `nofile` in /etc/security/limits.conf")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    return f"the open-file limit raised from {soft} to {needed} for this run (the hard limit is {hard})"
