"""A third-party backend that computes through the CPU reference under its own name."""
from accel.backends.cpu import CPUBackend


class EchoBackend(CPUBackend):
    name = "echo"
    priority = -1  # never chosen automatically

    def supports(self, spec):
        from accel import Support

        if spec.op == "attention":
            return Support(False, "echo computes no attention (declined on purpose for tests)")
        return super().supports(spec)


def not_a_backend():
    """Registered under the entry point but not a Backend subclass."""
