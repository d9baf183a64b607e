"""Kernel sets behind one seam (kernels/base.py): `torch` (reference), `cpu` (kernels/cpu/),
`triton` (kernels/triton/, wired in kernels/triton_set.py). docs/kernels.md."""
