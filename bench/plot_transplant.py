"""Draw docs/benchmarks-transplant.png from bench_transplant.py's JSON (run with a venv that has matplotlib).

    uv venv /tmp/benchplot && uv pip install --python /tmp/benchplot/bin/python matplotlib
    /tmp/benchplot/bin/python bench/plot_transplant.py build/bench/transplant.json docs/benchmarks-transplant.png
"""
from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src: str, out: str) -> None:
    data = json.load(open(src))
    summaries = data["summaries"]
    pairs = [("cp -a", "module copy (wall)", "module copy own elapsed"),
             ("cp -al", "module hardlink (wall)", "module hardlink own elapsed"),
             ("rsync -a no-op", "module no-op (wall)", "module no-op own elapsed")]
    fig, axes = plt.subplots(1, len(summaries), figsize=(5.2 * len(summaries), 3.6), squeeze=False)
    for ax, s in zip(axes[0], summaries, strict=True):
        m = s["median"]
        labels, base, wall, own = [], [], [], []
        for b, w, o in pairs:
            if b not in m:
                continue
            labels.append(b.replace(" no-op", "\nno-op"))
            base.append(m[b])
            wall.append(m[w])
            own.append(m[o])
        x = range(len(labels))
        ax.bar([i - 0.27 for i in x], base, 0.27, label="baseline tool")
        ax.bar(list(x), wall, 0.27, label="module, process wall")
        ax.bar([i + 0.27 for i in x], own, 0.27, label="module, own elapsed")
        ax.set_xticks(list(x))
        ax.set_xticklabels(["copy\n(vs cp -a)", "hardlink\n(vs cp -al)", "no-op re-run\n(vs rsync -a)"][:len(labels)])
        ax.set_ylabel("seconds (median)")
        ax.set_title(f"{s['label']}: {s['files']} files, {s['gb']:.2f} GB", fontsize=9)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=80)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
