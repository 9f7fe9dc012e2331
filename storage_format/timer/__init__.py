"""The 5.x timer message store's files (`timerWheelEnable`, on by default): `timerlog/` units, the
`timerwheel` slots, `config/timercheck` and `config/timermetrics`, as pure byte codecs.

The timer store is derived from the `rmq_sys_wheel_timer` queue but not reproducible from the commit log
(wall-clock write times, recalls, restarts), so reput never rebuilds it: recovery copies it, warns when the
commit-log cut leaves it pointing past the end (storage_format.recovery.timer), and repairs it on request.
"""
