"""Figures for `moeserve trace show --heatmap` and `moeserve place --plot` (matplotlib, Agg backend)."""
from __future__ import annotations

import numpy as np


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def heatmap(loads: np.ndarray, path: str, title: str, layer_ids=None) -> None:
    """Load per (layer, expert) [L, E] divided by the layer mean, as an image."""
    plt = _pyplot()
    rel = loads / np.maximum(loads.mean(axis=1, keepdims=True), 1e-12)
    fig, ax = plt.subplots(figsize=(min(4 + loads.shape[1] / 20, 16), 2 + loads.shape[0] / 8))
    im = ax.imshow(rel, aspect="auto", cmap="magma", interpolation="nearest")
    ax.set_xlabel("logical expert")
    ax.set_ylabel("MoE layer")
    if layer_ids is not None and len(layer_ids) == loads.shape[0]:
        ticks = np.linspace(0, loads.shape[0] - 1, min(loads.shape[0], 10)).astype(int)
        ax.set_yticks(ticks, [str(layer_ids[t]) for t in ticks])
    ax.set_title(title)
    fig.colorbar(im, ax=ax, label="load / layer mean")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def before_after(before: np.ndarray, after: np.ndarray, path: str, title: str) -> None:
    """Per-GPU load of the worst layer and per-layer balancedness, before vs after.

    before, after: rank loads [L, G] of the two plans on the same loads.
    """
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4))
    bal_b = before.mean(axis=1) / before.max(axis=1)
    bal_a = after.mean(axis=1) / after.max(axis=1)
    worst = int(np.argmin(bal_b))
    g = np.arange(before.shape[1])
    mean = before[worst].mean()
    ax1.bar(g - 0.2, before[worst] / mean, 0.4, label="before")
    ax1.bar(g + 0.2, after[worst] / mean, 0.4, label="after")
    ax1.axhline(1.0, color="k", lw=0.8)
    ax1.set(xlabel="GPU", ylabel="load / mean", title=f"layer {worst} (worst before)")
    ax1.legend()
    ax2.plot(bal_b, label=f"before (mean {bal_b.mean():.3f})")
    ax2.plot(bal_a, label=f"after (mean {bal_a.mean():.3f})")
    ax2.set(xlabel="MoE layer", ylabel="balancedness (mean/max)", ylim=(0, 1.02), title=title)
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
