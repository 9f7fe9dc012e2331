"""Where bytes go: the filesystem layer, output checks, atomic publishing, the work directory, the store gate, the live-broker check."""
