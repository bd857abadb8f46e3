"""A plugin whose import fails, as a plugin with a missing dependency would."""
import accel_test_plugins_missing_dependency  # noqa: F401

BrokenBackend = None
