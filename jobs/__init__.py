"""Entry points: `python -m jobs.<name>`, `python jobs/<name>.py`, `reput <name>` (`python -m jobs <name>`: the
console command, `__main__`) or `spark-submit jobs/<name>.py`.

Importing this package (or a job module) changes nothing: a job run as a program guards its start-up against
Ctrl-C itself (`interrupt.guard_startup` under `if __name__ == "__main__"`), the console command in `reput()`.
"""
__version__ = "0.7.0"
