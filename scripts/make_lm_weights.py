"""Writes ``saltmarsh_lm.txt``: chapter 10's trained character model, as chapter 11 reads it.

Chapter 11 measures attention sinks and streams text through caches with the model chapter 10 trains. It cannot
train that model itself with chapter 10's code: the course kit ships every chapter's release at once, so a given
cell of chapter 11 holding chapter 10's reference (RMSNorm, the decoder block, train_lm, ...) would hand a chapter
10 learner the answers. So this maintainer's tool runs chapter 10's *solution* notebook, from its first cell
through the training cell (the graded test cells are skipped), exactly as the book runs it, and writes the trained
parameters as text: chapter 11 loads them into a differently factored model of its own (a few functions over a
dictionary of tensors, with no module, cache or training code of chapter 10 in it).

File format (ASCII, so the package's ``data/*.txt`` carries it into the learner kit): comment lines start with
``#``; one line ``config`` followed by ``key=value`` pairs; then one line per parameter, ``name shape base64``,
where ``shape`` is comma-separated and ``base64`` holds the float32 values, little-endian, in row-major order.
float32 halves the file; chapter 11 computes in float64 from these values, so its printouts are the same on any
CPU. The run behind a committed file is stated in attention_course/data/README.md (its SHA-256 too): the trained
values differ in their last digits from one CPU to another, so a rerun elsewhere gives a slightly different file.

    .venv/bin/python scripts/make_lm_weights.py      # about a minute of CPU
"""
from __future__ import annotations

import base64
import os
import sys
from pathlib import Path

import nbformat
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "solutions" / "10_language_model" / "10_language_model.ipynb"
OUT = ROOT / "attention_course" / "data" / "saltmarsh_lm.txt"
OUT_BOS = ROOT / "attention_course" / "data" / "saltmarsh_lm_bos.txt"
LAST_CELL_MARK = "train_losses = train_lm(char_lm"  # the training cell: everything chapter 11 needs exists after it


def trained_model():
    """Run chapter 10's solution cells up to the training cell in one namespace; return (model, namespace)."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    sys.path.insert(0, str(ROOT))
    namespace: dict = {"__name__": "__chapter10__"}
    for cell in nbformat.read(SOURCE, as_version=4).cells:
        if cell.cell_type != "code" or cell.metadata.get("nbgrader", {}).get("grade"):
            continue  # markdown and graded test cells
        exec(compile(cell.source, "chapter10", "exec"), namespace)  # noqa: S102 - the course's own notebook
        if LAST_CELL_MARK in cell.source:
            return namespace["char_lm"], namespace
    raise SystemExit(f"no cell of {SOURCE} contains {LAST_CELL_MARK!r}")


def with_start_token(ns):
    """Chapter 10's recipe with one change: the vocabulary has one more token, BOS (id = the corpus's vocabulary
    size), and every training window starts with it (BOS and 127 characters cut from a random place)."""
    torch = ns["torch"]
    bos = ns["VOCAB_SIZE"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = ns["DecoderLM"](bos + 1, d_model=48, num_layers=2, num_heads=4, d_ff=128).to(dtype=ns["DTYPE"])
    gen = torch.Generator().manual_seed(1)

    def batch(step):
        inputs, targets = ns["get_batch"](ns["train_data"], ns["BATCH"], ns["CONTEXT"] - 1, gen)  # (B, 127) each
        first = torch.full((inputs.shape[0], 1), bos, dtype=inputs.dtype)
        return torch.cat([first, inputs], dim=1), torch.cat([inputs[:, :1], targets], dim=1)  # (B, 128) each

    try:
        ns["train_lm"](model, batch, ns["STEPS"], max_lr=ns["MAX_LR"], min_lr=ns["MIN_LR"], warmup_steps=ns["WARMUP"])
    finally:
        torch.set_num_threads(threads)
    return model.eval()


def write(model, ns, out, comment):
    block = model.blocks[0]
    config = {"vocab_size": model.embed.weight.shape[0], "d_model": model.embed.weight.shape[1],
              "num_layers": len(model.blocks), "num_heads": block.num_heads,
              "d_ff": block.ffn.gate.weight.shape[0], "rope_base": 10000, "eps": 1e-6,
              "context": ns["CONTEXT"], "steps": ns["STEPS"]}
    lines = [comment,
             "# Format: a config line, then one line per parameter: name, shape, base64 of float32 little-endian.",
             "config " + " ".join(f"{k}={v}" for k, v in config.items())]
    for name, p in model.state_dict().items():
        values = p.detach().cpu().numpy().astype("<f4")
        shape = ",".join(str(s) for s in values.shape)
        lines.append(f"{name} {shape} {base64.b64encode(values.tobytes()).decode('ascii')}")
    out.write_text("\n".join(lines) + "\n", encoding="ascii")
    print(f"wrote {out.relative_to(ROOT)}: {sum(p.numel() for p in model.state_dict().values())} parameters")


def main() -> None:
    model, ns = trained_model()
    write(model, ns, OUT, "# Chapter 10's trained character model (scripts/make_lm_weights.py wrote it; see data/README.md).")
    print(f"  held-out perplexity {ns['ppl_after']:.3f} after {ns['STEPS']} steps")
    write(with_start_token(ns), ns, OUT_BOS, "# Chapter 10's recipe with a BOS token starting every training window "
          "(scripts/make_lm_weights.py wrote it; see data/README.md).")


if __name__ == "__main__":
    main()
