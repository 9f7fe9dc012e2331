"""jobs.verify's comparisons: consume queues, index files, the pointer check and the findings registry."""
