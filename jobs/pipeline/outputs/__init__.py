"""Stages 3-4: consume-queue files and index files from the decode stage's work files."""
