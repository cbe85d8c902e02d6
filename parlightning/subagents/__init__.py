"""Subagents as real work: the `SubagentPool` seam and its pools (simulated, worker processes,
an OpenAI-compatible HTTP endpoint, on threads or on one event loop), and an orchestration
world built on a pool.

Imports stay light (no torch) so pool worker processes start fast; the world loads on use.
"""

from parlightning.subagents.pool import (
    PoolBase, PoolClosedError, SimulatedPool, SubagentPool, SubagentResult, UnknownHandleError, normalize,
)

__all__ = ["AsyncHTTPPool", "HTTPPool", "PoolBase", "PoolClosedError", "PoolOrchestrationWorld", "ProcessPool",
           "SimulatedPool", "SubagentPool", "SubagentResult", "UnknownHandleError", "normalize"]


def __getattr__(name: str):
    if name == "ProcessPool":
        from parlightning.subagents.process import ProcessPool

        return ProcessPool
    if name == "AsyncHTTPPool":
        from parlightning.subagents.async_http import AsyncHTTPPool

        return AsyncHTTPPool
    if name == "HTTPPool":
        from parlightning.subagents.http import HTTPPool

        return HTTPPool
    if name == "PoolOrchestrationWorld":
        from parlightning.subagents.world import PoolOrchestrationWorld

        return PoolOrchestrationWorld
    raise AttributeError(f"module 'parlightning.subagents' has no attribute {name!r}")
