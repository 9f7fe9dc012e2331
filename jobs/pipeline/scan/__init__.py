"""Stages 1-2: splits decoded in Spark tasks and stitched into the broker's one scan, what that scan hands on
(its contracts, a DLedger split's records, the report sections it completes); the commit-log data source."""
