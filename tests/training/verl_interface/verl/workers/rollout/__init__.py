"""A pinned copy of part of verl 0.9.1's interface (see tests/training/verl_interface/README.md)."""
