"""Every kernel name in the real files the tests read is categorised on purpose.

tests/data/kernel_categories_expected.tsv is the reviewed expectation (regenerate after review with
`.venv/bin/python -m tests.kernel_corpus --write`): a new name that falls to `other`, or a rule change that
moves a known name, fails here and shows up as a diff of that file.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from receipts.schema.categories import COMM_CATEGORIES, load_category_rules
from tests import kernel_corpus


def test_every_corpus_kernel_name_has_its_reviewed_category():
    expected = kernel_corpus.read()
    now = kernel_corpus.categorised()
    missing = sorted(set(now) - set(expected))
    assert not missing, f"{len(missing)} kernel names not reviewed yet (first: {missing[:3]}); review, then " \
                        "run .venv/bin/python -m tests.kernel_corpus --write"
    moved = {n: (expected[n], c) for n, c in now.items() if expected[n] != c}
    assert not moved, f"{len(moved)} kernel names changed category (expected, now): {list(moved.items())[:3]}"


# Names as they appear in public profiles: DeepSeek's profile-data (github.com/deepseek-ai/profile-data,
# train.json / prefill.json at 449602428a1b: DeepEP over EP64), torch symm_mem / vLLM custom all-reduce,
# NVSHMEM, Transformer Engine userbuffers, NCCL's two kernel-name generations.
COMMUNICATION = {
    "void dpsk::ep::internode::dispatch<false, 8, true, 8>(int const*, long*, int, int const*, int*)": "nccl_all_to_all",
    "void dpsk::ep::internode::combine<__nv_bfloat16, 8, 4, 8>(int4*, float*, bool const*)": "nccl_all_to_all",
    "void dpsk::ep::internode::notify_dispatch<false, 4>(int const*, long*, int, int const*, int*)": "nccl_all_to_all",
    "void dpsk::ep::internode::cached_notify<8>(int, int, int, int, int, void*, int**)": "nccl_all_to_all",
    "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)": "nccl_all_to_all",
    "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long)":
        "nccl_all_reduce",
    "two_shot_all_reduce_kernel_inplace": "nccl_all_reduce",
    "void nvshmemi_transfer_rma_kernel<NVSHMEMI_OP_PUT>(void*, void*, unsigned long)": "nccl_send_recv",
    "userbuffers_fp16_sum_inplace_gpu_rr_rs": "nccl_reduce_scatter",
    "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "nccl_all_gather",
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)": "nccl_all_reduce",
}
NOT_COMMUNICATION = {
    # DeepEP's layout kernel computes, and CUB scans in a namespace that merely ends in 'dpsk::ep'
    "void dpsk::ep::cuda::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int)": "moe",
    "void cdpsk::ep::CUB_200200_900_NS::DeviceScanKernel<int>(int)": "other",
    "void dpsk::gemm::fp8_gemm_kernel<128, 128>(float*)": "gemm",
}


@pytest.mark.parametrize("name,category", {**COMMUNICATION, **NOT_COMMUNICATION}.items())
def test_communication_beyond_nccl_is_communication(name, category):
    rules = load_category_rules(cwd=Path(tempfile.gettempdir()))
    assert rules.classify(name) == category
    assert (category in COMM_CATEGORIES) == (name in COMMUNICATION)


def test_deepep_kernels_count_as_communication_in_an_anatomy(tmp_path):
    """The real 2×H200 FSDP2 Kineto trace with its NCCL kernels renamed to DeepEP's: the anatomy's
    communication time is the same (before, a DeepEP step showed comm = 0)."""
    import gzip
    import json

    from receipts.ingest import kineto
    from tests.conftest import GPU_DATA

    original = sorted((GPU_DATA / "straggler" / "straggler_base_kineto" / "traces").glob("rank0.*"))[0]
    trace = json.loads(gzip.decompress(original.read_bytes()))
    renamed = 0
    for e in trace["traceEvents"]:
        if e.get("cat") == "kernel" and e.get("name", "").startswith("ncclDevKernel_"):
            e["name"] = "void dpsk::ep::internode::dispatch<false, 8, true, 8>(int const*, long*, int)"
            renamed += 1
    assert renamed > 10
    deepep = tmp_path / "rank0.deepep.pt.trace.json.gz"
    deepep.write_bytes(gzip.compress(json.dumps(trace).encode()))
    rules = load_category_rules(cwd=tmp_path)
    before = kineto.parse_files([original], rules=rules, keep_raw=False)
    after = kineto.parse_files([deepep], rules=rules, keep_raw=False)
    comm_before = before.steps["comm_ms"].sum()
    assert comm_before > 0
    assert after.steps["comm_ms"].sum() == pytest.approx(comm_before, rel=1e-12)
    assert "nccl_all_to_all" in set(after.rows["category"])
