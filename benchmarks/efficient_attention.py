"""Chapter 9's efficient attention against the naive version and PyTorch's fused attention: memory and time.

The functions measured are the reference solutions of ``solutions/09_efficient_attention`` (its setup cell,
solution cells and the cell that defines the memory tracker are executed here, so the notebook stays their
only owner). Every figure is reported as a ratio against a baseline measured in the same run:

- peak tensor memory of one attention call (the notebook's ``TensorMemoryMeter``: the bytes of the tensors PyTorch operators
  allocate, counted through a dispatch mode; exact and machine-independent, blind to a kernel's private
  scratch space), for naive attention (the baseline), ``tiled_attention`` and ``F.scaled_dot_product_attention``;
- with ``--rss`` (Linux): the growth of the peak resident set size of a fresh process around the same single
  call (peak reset through ``/proc/self/clear_refs``), which does see a kernel's private buffers (coarser: the
  allocator, freed-but-kept pages and the page size blur it);
- time of one attention call (median of ``--repeats``), naive as the baseline;
- training: forward and backward time (median of ``--repeats``), the peak tensor memory of forward plus
  backward, and the memory kept between them (what outlives the forward pass: the output and what autograd
  saved), for naive attention through autograd (the baseline), ``flash_attention`` (hand-written backward
  that recomputes tiles) and ``F.scaled_dot_product_attention`` through autograd (``--train-lengths``);
- time per generated token with the KV cache against recomputing everything (the baseline), on ``ToyDecoder``.

    .venv/bin/python benchmarks/efficient_attention.py [--lengths 1024 4096 8192] [--train-lengths 1024 4096]
        [--head-dim 32] [--block-size 512] [--repeats 3] [--tokens 64 256] [--rss] [--threads 1]
    .venv/bin/python benchmarks/efficient_attention.py --smoke   # the smallest size (tests/test_benchmarks.py)

``--smoke``: T = 256 (one call) and 128 (training), block 64 (so that tiling has several tiles), 4 tokens, one
repeat; every row and ratio is printed, none of the targets (they are stated at T = 4096 and 8192) applies.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CHAPTER = "09_efficient_attention"
SMOKE = {"lengths": [256], "train_lengths": [128], "block_size": 64, "tokens": [4], "repeats": 1}
TRACKER_CELL = "code-peak-memory"  # the notebook cell that defines naive_attention (the meter is in the setup cell)


def chapter_namespace() -> dict:
    """The reference solutions, ToyDecoder and the memory tracker, executed from the solution notebook."""
    from attention_course.cells import is_setup, is_solution

    nb = nbformat.read(ROOT / "solutions" / CHAPTER / f"{CHAPTER}.ipynb", as_version=4)
    namespace: dict = {"__name__": "chapter9"}
    for cell in nb.cells:
        if is_setup(cell) or is_solution(cell) or cell.get("id") == TRACKER_CELL:
            exec(compile(cell.source, f"<{cell.get('id')}>", "exec"), namespace)  # noqa: S102 - our own notebook
    return namespace


def attention_methods(ns: dict, block_size: int) -> dict:
    import torch.nn.functional as F

    return {
        "naive": ns["naive_attention"],
        "tiled": lambda q, k, v: ns["tiled_attention"](q, k, v, block_size=block_size),
        "sdpa": F.scaled_dot_product_attention,
    }


def inputs(T: int, d: int):
    g = torch.Generator().manual_seed(T)
    return tuple(torch.randn(1, 1, T, d, generator=g) for _ in range(3))  # (B, H, T, d), float32


def median_seconds(fn, *args, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def rss_growth_mib(method: str, T: int, d: int, block_size: int, threads: int) -> float:
    """Peak RSS growth of a fresh process around one call (Linux: the peak is reset through /proc/self/clear_refs)."""
    script = f"""
import json, sys, torch
sys.path.insert(0, {str(ROOT)!r})
from benchmarks.efficient_attention import attention_methods, chapter_namespace, inputs

def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))  # kB

torch.set_num_threads({threads})
fn = attention_methods(chapter_namespace(), {block_size})[{method!r}]
q, k, v = inputs({T}, {d})
with torch.no_grad():
    fn(*inputs(64, {d}))  # warm-up on a tiny input: lazy initialisation is not the algorithm's memory
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak (VmHWM) to the current resident size
    before = status("VmRSS")
    fn(q, k, v)
    after = status("VmHWM")
print(json.dumps((after - before) / 1024))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"RSS probe for {method} at T={T} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def train_rows(ns: dict, args) -> None:
    """Forward and backward of one head: times, peak tensor memory and memory kept for backward, as ratios
    against naive attention through autograd measured in the same run."""
    import torch.nn.functional as F

    methods = {"naive": ns["naive_attention"],
               "flash": lambda q, k, v: ns["flash_attention"](q, k, v, block_size=args.block_size),
               "sdpa": F.scaled_dot_product_attention}
    meter = ns["TensorMemoryMeter"]
    print(f"\ntraining: forward + backward of one head, d = {args.head_dim}, float32; ratios against naive "
          f"(autograd) measured in this run")
    print("    T  method  forward s  (x naive)  backward s  (x naive)  peak MiB  (x naive)  kept MiB  (x naive)")
    for T in args.train_lengths:
        q0, k0, v0 = inputs(T, args.head_dim)
        grad_out = torch.randn(q0.shape, generator=torch.Generator().manual_seed(T + 1))
        rows = {}
        for name, fn in methods.items():
            q, k, v = (t.clone().requires_grad_() for t in (q0, k0, v0))
            with meter() as m:
                out = fn(q, k, v)
                kept = m.current / 2**20
                torch.autograd.backward(out, grad_out)
            peak = m.peak / 2**20
            del out
            forward_s, backward_s = [], []
            for _ in range(args.repeats):
                q, k, v = (t.clone().requires_grad_() for t in (q0, k0, v0))
                start = time.perf_counter()
                out = fn(q, k, v)
                middle = time.perf_counter()
                torch.autograd.backward(out, grad_out)
                forward_s.append(middle - start)
                backward_s.append(time.perf_counter() - middle)
                del out
            rows[name] = (statistics.median(forward_s), statistics.median(backward_s), peak, kept)
        base = rows["naive"]
        for name, (f_s, b_s, peak, kept) in rows.items():
            print(f"{T:5d}  {name:6s} {f_s:9.3f}  {ratio(f_s, base[0]):>9s}  {b_s:10.3f}  {ratio(b_s, base[1]):>9s}"
                  f"  {peak:8.1f}  {ratio(peak, base[2]):>9s}  {kept:8.2f}  {ratio(kept, base[3]):>9s}")
        if T == 4096:
            met = rows["flash"][3] <= rows["naive"][3] / 8
            print(f"       target (flash keeps <= 1/8 of naive's memory for backward at T = 4096): "
                  f"{'met' if met else 'NOT met'}")


def ratio(x: float, base: float) -> str:
    return f"{x / base:.2g}" if base > 0 else "n/a"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 8192])
    parser.add_argument("--train-lengths", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--head-dim", type=int, default=32)
    parser.add_argument("--block-size", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokens", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: comparable across machines)")
    parser.add_argument("--rss", action="store_true", help="also measure peak RSS growth in fresh processes (slow)")
    parser.add_argument("--smoke", action="store_true", help="the smallest size (sets the lengths, block size, tokens "
                                                             "and repeats)")
    args = parser.parse_args(argv)
    if args.smoke:
        vars(args).update(SMOKE)
    torch.set_num_threads(args.threads)
    ns = chapter_namespace()
    methods = attention_methods(ns, args.block_size)
    tracker = ns["TensorMemoryMeter"]

    print(f"one attention call, (B, H) = (1, 1), d = {args.head_dim}, float32, {args.threads} thread(s), "
          f"tiled block {args.block_size}; ratios against naive measured in this run")
    header = "    T  method  peak tensor MiB  (x naive)  median s  (x naive)" + ("  RSS growth MiB  (x naive)" if args.rss else "")
    print(header)
    for T in args.lengths:
        q, k, v = inputs(T, args.head_dim)
        rows = {}
        with torch.no_grad():
            for name, fn in methods.items():
                with tracker() as peak:
                    fn(q, k, v)
                seconds = median_seconds(fn, q, k, v, repeats=args.repeats)
                rss = rss_growth_mib(name, T, args.head_dim, args.block_size, args.threads) if args.rss else None
                rows[name] = (peak.peak / 2**20, seconds, rss)
        base = rows["naive"]
        for name, (mib, seconds, rss) in rows.items():
            line = (f"{T:5d}  {name:6s} {mib:15.1f}  {ratio(mib, base[0]):>9s}  {seconds:8.3f}  {ratio(seconds, base[1]):>9s}")
            if args.rss:
                line += f"  {rss:14.1f}  {ratio(rss, base[2]):>9s}"
            print(line)
        if T == 8192:
            met = rows["tiled"][0] <= rows["naive"][0] / 10
            print(f"       target (tiled peak tensor memory <= 1/10 of naive at T = 8192): {'met' if met else 'NOT met'}")

    train_rows(ns, args)

    print("\ngreedy decoding with ToyDecoder(vocab 64, E 64, 4 heads), prompt of 16 tokens; baseline: recompute everything")
    torch.manual_seed(4)
    model = ns["ToyDecoder"](vocab_size=64, embed_dim=64, num_heads=4, max_len=16 + max(args.tokens) + 1)
    prompt = torch.randint(0, 64, (1, 16))

    def without_cache(n):
        tokens = prompt
        for _ in range(n):
            tokens = torch.cat([tokens, model(tokens)[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
        return tokens

    with torch.no_grad():
        for n in args.tokens:
            cached = median_seconds(lambda: ns["generate"](model, prompt, n), repeats=args.repeats) / n
            full = median_seconds(lambda: without_cache(n), repeats=args.repeats) / n
            same = torch.equal(ns["generate"](model, prompt, n)[0], without_cache(n))
            print(f"  {n:5d} tokens: {1000 * cached:.2f} ms/token with the cache, {1000 * full:.2f} ms/token recomputing "
                  f"(cache takes {ratio(cached, full)} of the time); same tokens: {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
