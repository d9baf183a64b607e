"""Tile configurations kept as data (kernels/triton/tile_configs.py, configs/fused_moe.json): what the
tuning script stores, lookups by card, shape and batch read back; the fused MoE takes a tuned entry
over its heuristic; the tuning script's dry run writes a table the lookup reads."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from moeserve.kernels.triton import fused_moe, tile_configs  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SHAPE = "S=32,H=7168,I=2048,dtype=bfloat16"


def test_store_then_lookup_by_card_shape_and_batch(tmp_path):
    for rows, config in ((64, [64, 128, 64, 8, 3]), (16, [16, 64, 128, 4, 4]), (1024, [128, 128, 64, 8, 3])):
        tile_configs.store("fused_moe", "cpu", SHAPE, rows, config, tmp_path)
    data = json.loads((tmp_path / "fused_moe.json").read_text())
    assert data["version"] == tile_configs.VERSION and list(data["configs"]["cpu"][SHAPE]) == ["16", "64", "1024"]
    cpu = torch.device("cpu")
    # the smallest tuned batch at or above the batch's rows per slot, the largest past them all
    assert tile_configs.lookup("fused_moe", cpu, SHAPE, 3.5, tmp_path) == [16, 64, 128, 4, 4]
    assert tile_configs.lookup("fused_moe", cpu, SHAPE, 17, tmp_path) == [64, 128, 64, 8, 3]
    assert tile_configs.lookup("fused_moe", cpu, SHAPE, 5000, tmp_path) == [128, 128, 64, 8, 3]
    assert tile_configs.lookup("fused_moe", cpu, "S=8,H=4096,I=14336,dtype=bfloat16", 16, tmp_path) is None
    assert tile_configs.lookup("fused_moe", cpu, SHAPE, 16, tmp_path / "none") is None


def test_a_table_of_another_version_is_refused(tmp_path):
    (tmp_path / "fused_moe.json").write_text(json.dumps({"version": 99, "configs": {}}))
    with pytest.raises(ValueError, match="version 99"):
        tile_configs.table("fused_moe", tmp_path)


def test_the_fused_moe_takes_a_tuned_entry_over_its_heuristic(tmp_path, monkeypatch):
    w13, w2 = torch.zeros(4, 2 * 24, 40), torch.zeros(4, 40, 24)
    assert fused_moe.pick_tiles(8, w13, w2) == fused_moe.tiles_for(8, 4)
    tile_configs.store("fused_moe", "cpu", fused_moe.shape_key(w13, w2), 2, [32, 32, 32, 4, 2], tmp_path)
    monkeypatch.setattr(tile_configs, "CONFIG_DIR", tmp_path)
    assert fused_moe.pick_tiles(8, w13, w2) == fused_moe.Tiles(32, 32, 32, 4, 2)


def test_the_shipped_table_loads():
    assert isinstance(tile_configs.table("fused_moe"), dict)


@pytest.mark.slow
def test_the_tuning_scripts_dry_run_writes_a_table_the_lookup_reads(tmp_path):
    out = tmp_path / "fused_moe.json"
    script = str(REPO / "benchmarks" / "tune_fused_moe.py")
    proc = subprocess.run([sys.executable, script, "--dry-run", "--out", str(out)], cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shapes = json.loads(out.read_text())["configs"]["cpu"]
    (shape,) = shapes  # the dry run's tiny stand-in for both models
    assert list(shapes[shape]) == ["1", "4"]
    assert tile_configs.lookup("fused_moe", torch.device("cpu"), shape, 3, tmp_path) is not None
