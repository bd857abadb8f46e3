"""accel.conformance.bench."""
