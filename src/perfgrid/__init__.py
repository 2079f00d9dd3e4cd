"""perfgrid: reproduce classic runtime micro-benchmarks on this machine."""

__version__ = "0.1.0"
