"""scripts/train_mtp_model.py: a few training steps on random token ids, then its export, whose own check
compares moeserve's main and MTP logits with the training modules' (the corpus is not needed here)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow  # builds and exports a small DeepSeek-V3

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def test_steps_lower_both_losses_and_the_export_serves_the_trained_layer(tmp_path):
    sys.path.insert(0, str(SCRIPTS))
    try:
        import train_mtp_model as t
    finally:
        sys.path.remove(str(SCRIPTS))
    model, mtp = t.build(seed=0)
    opt = torch.optim.AdamW(list(model.parameters()) + list(mtp.parameters()), lr=3e-3)
    x = torch.randint(3, 400, (2, 33), generator=torch.Generator().manual_seed(0))
    first = None
    for _ in range(4):
        main, extra = t.losses(model, mtp, x)
        first = first or (main.item(), extra.item())
        opt.zero_grad()
        (main + t.MTP_WEIGHT * extra).backward()
        opt.step()
    assert main.item() < first[0] and extra.item() < first[1]
    torch.save({"model": model.state_dict(), "mtp": mtp.state_dict(), "steps": 4, "held_out": {}},
               tmp_path / "mtp-checkpoint.pt")
    t.stage_export(tmp_path, tmp_path / "out")  # asserts moeserve's logits equal the training modules'
    out = tmp_path / "out"
    assert {"config.json", "mtp.safetensors", "tokenizer.json"} <= {p.name for p in out.iterdir()}
