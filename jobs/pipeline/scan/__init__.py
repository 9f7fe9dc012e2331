"""Stages 1-2: splits decoded in Spark tasks and stitched into the broker's one scan; the commit-log data source."""
