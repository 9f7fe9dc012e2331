"""reput's benchmark: a synthetic store written with the project's encoder, and the measured stages
(raw read, decode only, jobs.rebuild, jobs.verify) on it. Run it with `python -m bench` or `make bench`."""
