"""The plain-torch implementations behind the `torch` kernel set (kernels/base.py): the oracle every
other set is tested against, and what runs on a device no other set covers."""
