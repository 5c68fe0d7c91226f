"""formloop: formulation-driven GPU kernel and hardware-software co-design."""
__version__ = "0.1.0"
