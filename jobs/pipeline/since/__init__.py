"""`rebuild --since OUT1`: continue an earlier rebuild from where it ended instead of decoding the whole log."""
