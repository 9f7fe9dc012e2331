"""Spark plumbing shared by every job: filesystem, session, split decoding, build stages, publishing."""
