"""Mechanism: move token rows to the ranks holding their experts and back (see base.py)."""
from moeserve.dispatch.a2a import A2ADispatcher, A2AHandle
from moeserve.dispatch.a2a_ll import A2ALLDispatcher, A2ALLHandle
from moeserve.dispatch.agrs import AgrsDispatcher, AgrsHandle
from moeserve.dispatch.base import Dispatcher, ExpertBatch, Handle
from moeserve.dispatch.local import LocalDispatcher, LocalHandle
from moeserve.dispatch.onesided import OneSidedDispatcher, OneSidedHandle
from moeserve.dispatch.registry import AutoDispatcher, StepBounds, dispatcher_names, make_dispatcher

__all__ = [
    "A2ADispatcher",
    "A2AHandle",
    "A2ALLDispatcher",
    "A2ALLHandle",
    "AgrsDispatcher",
    "AgrsHandle",
    "AutoDispatcher",
    "Dispatcher",
    "ExpertBatch",
    "Handle",
    "LocalDispatcher",
    "LocalHandle",
    "OneSidedDispatcher",
    "OneSidedHandle",
    "StepBounds",
    "dispatcher_names",
    "make_dispatcher",
]
