"""accel.backends.cupy."""
