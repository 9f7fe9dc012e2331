"""jobs.catalog's Spark stage: Parquet files of the decoded records."""
