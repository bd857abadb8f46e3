"""accel.conformance.report."""
