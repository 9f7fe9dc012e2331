"""What a store says about itself before any scan: its generation and how far its dispatch goes."""
