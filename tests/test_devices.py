"""Reference solutions are device-agnostic: every result lives on its inputs' device.

The meta device holds shapes but no data, so running the hidden tests' inputs through the reference
on ``meta`` is a cheap CPU-only way to catch a tensor allocated on the wrong device: mixing it with a
meta tensor raises, and a result on the wrong device shows in the records. A check whose function needs
real values (a Python bool, ``.item()``) cannot run on meta; such an error is excused and the rest of that
cell goes unaudited on the CPU (the CUDA run covers it where a GPU exists). With CUDA present, the whole
reference run also happens on the GPU and must match the CPU expectations.
"""
from __future__ import annotations

import os

import nbformat
import pytest
import torch
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from attention_course import verdicts
from attention_course.encoding import DecodedTensor, decode
from attention_course.expected import load_expected, records_table, reference_cells, run_reference
from autograder.course import Course

pytestmark = pytest.mark.notebooks

COURSE = Course()
CHAPTERS = COURSE.chapters()


# Errors that only say "this needs values", which a meta tensor does not have (a Python bool from
# torch.equal, .item(), ...). A tensor on the wrong device fails differently ("expected device", "same
# device") and is never excused.
NEEDS_VALUES = ("with Meta tensors", "on meta tensors", "out of meta tensor", "meta tensor",
                "data-independent implementation")  # torch.nonzero on meta: its output's size needs the values
WRONG_DEVICE = ("expected device", "same device", "device mismatch")


@pytest.fixture(scope="module")
def meta_kernel(tmp_path_factory):
    """One kernel, in reference mode on the meta device, for every chapter's audit: a kernel start and a torch
    import were most of each chapter's time. Each chapter starts from an empty namespace (``%reset -f``), so
    nothing one chapter defines can stand in for what another leaves undefined."""
    km = KernelManager(kernel_name="python3")
    km.start_kernel(env=dict(os.environ, ATTENTION_COURSE_GRADING="reference", ATTENTION_COURSE_DEVICE="meta"),
                    cwd=str(tmp_path_factory.mktemp("meta")))
    yield km
    km.shutdown_kernel(now=True)


def run_on_meta(km, chapter):
    nb = reference_cells(COURSE.source_notebook(chapter))
    nb.cells.insert(0, nbformat.v4.new_code_cell("%reset -f"))
    client = NotebookClient(nb, km=km, timeout=600, allow_errors=True)
    try:
        client.execute()
    finally:
        client.kc.stop_channels()
    return nb


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_reference_keeps_results_on_the_input_device(meta_kernel, chapter):
    nb = run_on_meta(meta_kernel, chapter)
    errors = [f"{o.ename}: {o.evalue}" for c in nb.cells if c.cell_type == "code"
              for o in c.get("outputs", []) if o.output_type == "error"]
    misplaced = [e for e in errors if any(w in e for w in WRONG_DEVICE) or not any(n in e for n in NEEDS_VALUES)]
    assert not misplaced, f"the reference fails on the meta device: {misplaced}"
    devices = {}
    for key, rec in records_table(nb).items():
        got = decode(rec["got"])
        if isinstance(got, DecodedTensor):
            devices[key] = got.device
    off_device = {k: d for k, d in devices.items() if d != "meta"}
    assert devices, "no tensor results were recorded"
    assert not off_device, f"results not on the inputs' device: {off_device}"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
@pytest.mark.parametrize("chapter", CHAPTERS)
def test_reference_on_cuda_matches_cpu(chapter):
    expected = load_expected(COURSE.root, chapter)
    on_gpu = run_reference(COURSE.source_notebook(chapter), device="cuda")
    assert set(on_gpu) == set(expected)
    for key, rec in expected.items():
        if rec["kind"] == "matches_reference":
            gpu = decode(on_gpu[key]["got"])
            verdict = verdicts.compare(gpu, decode(rec["got"]), rec["params"].get("rtol"),
                                       rec["params"].get("atol"), check_dtype=True)
            assert verdict.passed, f"{key} differs on CUDA: {verdict.message}"
