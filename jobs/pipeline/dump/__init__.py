"""jobs.dump and jobs.query: random-access readers with no Spark, and their text forms."""
