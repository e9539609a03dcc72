"""Claim 4 with the right denominator: M's share of the model, loaded count and upstream count, and its spread
over decoder blocks (issue 32).

    python experiments/claims/claim4_size.py --gguf qwen2_5_coder_1_5b=MODEL.gguf [--gguf NAME=FILE ...] \
        [--run DIR ...] [--points CSV_OR_DIR ...] --out experiments/results/claims_5draws/claim4_size

The GGUF files of ../shared/models store ``output.weight`` beside ``token_embd.weight``, so a model loaded
from one has an untied lm_head, and its parameter count (the sum of the file's tensors) counts the embedding
matrix twice. The upstream Qwen2.5-Coder-0.5B/1.5B checkpoints tie the two (``tie_word_embeddings: true``):
this script checks, from each file, that the two tensors are the same matrix quantised twice (correlation of
the dequantised values; a relative difference of the size of the quantisation noise), and then counts it once.

``--run``: folders holding ``selection.safetensors`` (a point run with ``save_selection=true``, or a sweep folder
of such points): M's size and its share per decoder block, from the masks. ``--points``: ``points.csv`` files or
sweep folders of ``results.json`` whose mathneuro points give M's size over draws and filters (e.g. committed
results of earlier runs, or prune15). Writes ``<out>.json`` and ``<out>.md``.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

import numpy as np

from mathneuro.methods.counts import count_entries, per_layer_counts
from mathneuro.methods.selection import SelectionFile

UPSTREAM_NOTE = ("Qwen2.5-Coder model cards: 1.5B-Instruct 1.54 B parameters (1.31 B non-embedding), 0.5B-Instruct "
                 "0.49 B (0.36 B non-embedding), both 'tied word embeddings' (config.json tie_word_embeddings: true)")
ROWS = (1000, 400)  # the vocabulary rows compared: 400 from row 1000 (all would dequantise 233 M values twice)


def gguf_facts(path: Path) -> dict:
    """Tensor counts of a GGUF, and whether its output and embedding tensors are one matrix quantised twice."""
    import gguf
    from gguf import quants

    reader = gguf.GGUFReader(str(path))
    tensors = {t.name: t for t in reader.tensors}
    total = sum(int(t.n_elements) for t in reader.tensors)
    facts: dict = {"file": str(path), "tensors": len(tensors), "loaded_parameters": total}
    emb, out = tensors.get("token_embd.weight"), tensors.get("output.weight")
    facts["token_embd"] = int(emb.n_elements) if emb is not None else None
    facts["output"] = int(out.n_elements) if out is not None else None
    if emb is None or out is None:  # no separate output tensor: the file itself ties them
        facts.update(upstream_parameters=total, output_stored_twice=False)
        return facts
    start = min(ROWS[0], max(0, len(emb.data) - ROWS[1]))
    rows = slice(start, start + ROWS[1])
    a = quants.dequantize(emb.data[rows], emb.tensor_type).astype(np.float64).ravel()
    b = quants.dequantize(out.data[rows], out.tensor_type).astype(np.float64).ravel()
    corr = float(np.corrcoef(a, b)[0, 1])
    rel = float(np.linalg.norm(a - b) / np.linalg.norm(b))
    same = corr > 0.99
    facts.update(quant_types=[emb.tensor_type.name, out.tensor_type.name],
                 rows_compared=[rows.start, min(rows.stop, len(emb.data))],
                 correlation=round(corr, 5), relative_difference=round(rel, 4), output_stored_twice=same,
                 upstream_parameters=total - int(out.n_elements) if same else total)
    return facts


def selection_files(folders: list[str]) -> list[Path]:
    found: list[Path] = []
    for folder in folders:
        p = Path(folder)
        found += ([p / "selection.safetensors"] if (p / "selection.safetensors").is_file()
                  else sorted(p.glob("*/selection.safetensors")))
    return found


def block_spread(path: Path) -> dict:
    """M's count and share per decoder block, from a saved selection (masks only)."""
    sel = SelectionFile(path)
    counts = {k: v for k, v in per_layer_counts(sel).items() if k.isdigit()}
    total = sum(counts.values())
    shares = {k: v / total for k, v in counts.items()}
    values = list(shares.values())
    results = path.parent / "results.json"
    point = json.loads(results.read_text()).get("point", {}) if results.is_file() else {}
    recorded = json.loads(results.read_text()).get("selection", {}).get("per_layer") if results.is_file() else None
    return {"file": str(path), "point": point, "num_selected": total, "num_scored": count_entries(sel),
            "blocks": len(counts), "per_block_count": counts,
            "per_block_share": {k: round(v, 5) for k, v in shares.items()},
            "share_min": min(values), "share_max": max(values), "share_even": 1 / len(values),
            "max_over_min": max(values) / min(values), "cv": statistics.pstdev(values) / statistics.mean(values),
            "matches_results_json": recorded is None or {k: v for k, v in recorded.items() if k.isdigit()} == counts}


def point_rows(sources: list[str]) -> list[dict]:
    """mathneuro points (model, filter, top_k, seed, num_selected, num_parameters) from CSVs or results.json folders."""
    rows: list[dict] = []
    for src in sources:
        p = Path(src)
        if p.is_file():
            with open(p, newline="") as fh:
                for r in csv.DictReader(fh):
                    layers = {k[len("per_layer/"):]: int(float(v)) for k, v in r.items()
                              if k.startswith("per_layer/") and k[len("per_layer/"):].isdigit() and v not in ("", None)}
                    rows.append({"source": str(p), "model": r.get("model"), "filter": r.get("filter"),
                                 "method": r.get("method"), "top_k": float(r.get("top_k") or "nan"),
                                 "seed": r.get("seed"),
                                 "num_selected": int(float(r["selection/num_selected"])),
                                 "num_parameters": int(float(r["selection/num_parameters"])), "per_layer": layers})
        else:
            for res in sorted(p.glob("**/results.json")):
                d = json.loads(res.read_text())
                pt, sel = d.get("point", {}), d.get("selection", {})
                if d.get("status") != "complete" or "num_selected" not in sel:
                    continue
                layers = {k: v for k, v in (sel.get("per_layer") or {}).items() if k.isdigit()}
                rows.append({"source": str(res.parent), "model": pt.get("model"), "filter": pt.get("filter"),
                             "method": pt.get("method"), "top_k": pt.get("top_k"), "seed": pt.get("seed"),
                             "num_selected": sel["num_selected"], "num_parameters": sel["num_parameters"],
                             "per_layer": layers})
    return [r for r in rows if r["method"] == "mathneuro"]


def summarise_points(rows: list[dict], models: dict) -> list[dict]:
    """One row per (model, filter, top_k): M's size range over its points, as % of the loaded and upstream counts."""
    groups: dict = {}
    for r in rows:
        groups.setdefault((r["model"], r["filter"], r["top_k"]), []).append(r)
    out = []
    for (model, filt, top_k), rs in sorted(groups.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        facts = models.get(model)
        loaded = {r["num_parameters"] for r in rs}
        upstream = facts["upstream_parameters"] if facts and loaded == {facts["loaded_parameters"]} else None
        sizes = sorted({(r["source"], r["seed"], r["num_selected"]) for r in rs}, key=lambda x: x[2])
        counts = [s[2] for s in sizes]
        shares = [v / sum(r["per_layer"].values()) for r in rs if r.get("per_layer") for v in r["per_layer"].values()]
        blocks = {len(r["per_layer"]) for r in rs if r.get("per_layer")}
        out.append({"model": model, "filter": filt, "top_k": top_k, "points": len(counts),
                    "seeds": sorted({str(s[1]) for s in sizes}),
                    "num_selected_min": counts[0], "num_selected_max": counts[-1], "loaded_parameters": sorted(loaded),
                    "pct_loaded": ([100 * c / next(iter(loaded)) for c in (counts[0], counts[-1])]
                                   if len(loaded) == 1 else None),
                    "upstream_parameters": upstream,
                    "pct_upstream": [100 * c / upstream for c in (counts[0], counts[-1])] if upstream else None,
                    "blocks": sorted(blocks), "block_share_min": min(shares) if shares else None,
                    "block_share_max": max(shares) if shares else None})
    return out


def markdown(report: dict) -> str:
    lines = ["# Claim 4: M's share of the model, with both denominators", "",
             "| model | loaded parameters (GGUF tensors) | output.weight | same matrix as token_embd? | upstream "
             "parameters (embeddings once) |",
             "|---|---|---|---|---|"]
    for name, f in report["models"].items():
        same = (f"yes (corr {f['correlation']}, rel. diff {f['relative_difference']}, {'/'.join(f['quant_types'])})"
                if f.get("output_stored_twice") else "no")
        lines.append(f"| {name} | {f['loaded_parameters']:,} | {f['output'] or 0:,} | {same} | "
                     f"{f['upstream_parameters']:,} |")
    lines += ["", f"Upstream facts: {report['upstream_note']}.", ""]
    if report["points"]:
        lines += ["| model | filter | K | points (seeds) | M (weights) | % of loaded | % of upstream | block share of "
                  "M (min–max, all points) |",
                  "|---|---|---|---|---|---|---|---|"]
        for p in report["points"]:
            def rng(v):
                return "–" if not v else (f"{v[0]:.2f}" if abs(v[0] - v[1]) < 5e-3 else f"{v[0]:.2f}–{v[1]:.2f}")
            spread = ("–" if p["block_share_min"] is None else
                      f"{100 * p['block_share_min']:.2f}–{100 * p['block_share_max']:.2f} % "
                      f"({'/'.join(map(str, p['blocks']))} blocks)")
            m = f"{p['num_selected_min']:,}" + ("" if p["num_selected_min"] == p["num_selected_max"]
                                                else f"–{p['num_selected_max']:,}")
            lines.append(f"| {p['model']} | {p['filter']} | {p['top_k']} | {p['points']} ({','.join(p['seeds'])}) | "
                         f"{m} | {rng(p['pct_loaded'])} | {rng(p['pct_upstream'])} | {spread} |")
        lines.append("")
    for s in report["selections"]:
        pt = s["point"]
        lines += [f"## Per-block spread: {pt.get('model')} {pt.get('filter')} filter, K = {pt.get('top_k')}, draw "
                  f"{pt.get('seed')}", "",
                  f"M = {s['num_selected']:,} weights over {s['blocks']} blocks; share per block "
                  f"{100 * s['share_min']:.2f}–"
                  f"{100 * s['share_max']:.2f} % (even: {100 * s['share_even']:.2f} %), largest / smallest = "
                  f"{s['max_over_min']:.2f}, "
                  f"coefficient of variation {s['cv']:.3f}; per-block counts equal results.json's: "
                  f"{s['matches_results_json']}.", "",
                  "| block | " + " | ".join(s["per_block_share"]) + " |", "|---|" + "---|" * len(s["per_block_share"]),
                  "| % of M | " + " | ".join(f"{100 * v:.2f}" for v in s["per_block_share"].values()) + " |", ""]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gguf", action="append", default=[],
                   help="NAME=FILE: a model's GGUF (NAME as in results' point.model)")
    p.add_argument("--run", action="append", default=[], help="folders with selection.safetensors (or sweeps of them)")
    p.add_argument("--points", action="append", default=[], help="points.csv files or folders of results.json")
    p.add_argument("--out", required=True, help="output prefix: writes <out>.json and <out>.md")
    args = p.parse_args(argv)
    try:
        models = {}
        for item in args.gguf:
            name, _, path = item.partition("=")
            models[name] = gguf_facts(Path(path))
        report = {"models": models, "upstream_note": UPSTREAM_NOTE,
                  "selections": [block_spread(f) for f in selection_files(args.run)],
                  "points": summarise_points(point_rows(args.points), models)}
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(report) + "\n")
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
