"""Mechanism: move token rows to the ranks holding their experts and back (see base.py)."""
from moeserve.dispatch.base import Dispatcher, ExpertBatch, Handle
from moeserve.dispatch.local import LocalDispatcher

__all__ = ["Dispatcher", "ExpertBatch", "Handle", "LocalDispatcher"]
