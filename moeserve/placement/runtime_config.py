"""`PlacementRuntimeConfig`: the routing recorder and online rebalancing of a running engine.

Kept out of config.py so the placement runtime owns its knobs; `EngineConfig.placement_runtime`
holds one. Every field is plain data (it travels to rank processes as JSON).
"""
from __future__ import annotations

from dataclasses import dataclass

from moeserve.errors import ConfigError


@dataclass(frozen=True)
class PlacementRuntimeConfig:
    record_trace_dir: str | None = None  # record routing from start-up, one trace file per window here
    record_window_steps: int = 100  # engine steps per recorded window
    eplb_interval: int = 0  # re-plan and move experts every this many engine steps; 0 = never
    eplb_window: int = 0  # steps of routing counts each re-plan uses; 0 = eplb_interval
    eplb_num_groups: int = 1  # expert groups handed to the optimizer (locality needs > 1 and a node count)

    @property
    def window(self) -> int:
        return self.eplb_window or self.eplb_interval

    def validate(self) -> None:
        if self.record_window_steps < 1:
            raise ConfigError(f"--record-window-steps must be >= 1, got {self.record_window_steps}")
        if self.eplb_interval < 0 or self.eplb_window < 0:
            raise ConfigError(
                f"--eplb-interval and --eplb-window must be >= 0, got {self.eplb_interval} and {self.eplb_window}"
            )
        if self.eplb_window and not self.eplb_interval:
            raise ConfigError("--eplb-window needs --eplb-interval (the steps between re-plans)")
        if self.eplb_num_groups < 1:
            raise ConfigError(f"--eplb-num-groups must be >= 1, got {self.eplb_num_groups}")
