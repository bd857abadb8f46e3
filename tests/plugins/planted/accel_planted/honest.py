"""A correct backend that declines bfloat16: the suite must count its cases as unsupported (and
see UnsupportedError from the public ops), not as failures."""
from accel.backend import Support
from accel.backends.cpu import CPUBackend


class DeclinesBfloat16(CPUBackend):
    name = "planted_declines_bf16"
    priority = -100

    def supports(self, spec) -> Support:
        if "bfloat16" in spec.in_dtypes:
            return Support(False, "bfloat16 is not implemented by this test backend")
        return super().supports(spec)
