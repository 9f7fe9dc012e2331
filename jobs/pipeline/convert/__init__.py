"""convert's stages: list the DLedger records, lay out the plain commit log, write its segments."""
