"""Entry points: `python -m jobs.<name>` (embedded local Spark) or `spark-submit jobs/<name>.py`."""
