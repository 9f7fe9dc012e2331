"""`rebuild --since OUT1`: continue OUT1, an earlier reput output, from where it ended instead of decoding the whole
log."""
