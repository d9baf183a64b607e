"""What GET /health says of a decode server's quarantined KV blocks (core/scheduler.py): blocks held
because a failed KV read still running may write into them, until NIXL reports the read ended.

Policy (docs/disaggregation.md, "Failures"): held blocks never make /health non-200. The server
still serves with the rest of its cache, and a load balancer that took it out of rotation for them
would turn a few held blocks into a lost server. The body names them, and says "degraded" (still
200) when a held read is older than QUARANTINE_STALE_S (a read that runs six times its timeout has
a killed prefill peer, and its blocks stay held until this server restarts) or the held blocks are
QUARANTINE_SHARE of the cache or more (capacity visibly lost): what an operator alerts on.
Cheap: it reads the engine's last heartbeat's numbers, nothing else.
"""
from __future__ import annotations

from typing import Any

QUARANTINE_STALE_S = 60.0  # the read timeout (rank_agent.READ_TIMEOUT_S) is 10 s
QUARANTINE_SHARE = 0.25


def kv_quarantine(stats: dict[str, Any]) -> tuple[dict[str, Any], str | None] | None:
    """(the report /health shows, the reason it is degraded or None) for a server with a KV transfer;
    None for one without (its stats carry no transfer counters)."""
    if "kv_transfer_failures" not in stats:
        return None
    blocks = int(stats.get("kv_blocks_quarantined", 0))
    total = int(stats.get("kv_blocks_total", 0))
    oldest = float(stats.get("kv_quarantine_oldest_s", 0.0))
    share = blocks / total if total else 0.0
    report = {"blocks_held": blocks, "reads_outstanding": int(stats.get("kv_reads_quarantined", 0)),
              "oldest_s": round(oldest, 1), "share_of_cache": round(share, 4)}
    reason = None
    if blocks and share >= QUARANTINE_SHARE:
        reason = (f"{blocks} KV blocks ({share:.0%} of the cache) are held for failed KV reads still running; "
                  f"they come back when the reads end, or at a restart")
    elif blocks and oldest >= QUARANTINE_STALE_S:
        reason = (f"{blocks} KV blocks have been held for {oldest:.0f} s for a failed KV read still running (its "
                  f"prefill server was likely killed); a restart gives them back")
    return report, reason
