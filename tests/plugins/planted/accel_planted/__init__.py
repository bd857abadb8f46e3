"""Backends for testing accel's conformance suite: each wraps the correct CPU backend with ONE
planted bug (``bugs``), or is correct but declines some cases (``honest``). All rank below 0, so
automatic backend selection never picks them."""
