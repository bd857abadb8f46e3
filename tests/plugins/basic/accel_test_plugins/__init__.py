"""Test plugins for accel: a working third-party backend and deliberately broken registrations."""
