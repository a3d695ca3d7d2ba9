"""Engines move blocks and statistics; the fit loop drives a model through them."""
