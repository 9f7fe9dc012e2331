"""How a job runs: command line, console command, failures, signals, fault hooks, the Spark session, its worker daemon, Spark tasks, packaging for a cluster."""
