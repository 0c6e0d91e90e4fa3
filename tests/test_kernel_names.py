"""One kernel, one name, whichever profiler recorded it (schema/kernel_names.py): the FSDP2 2-GPU workload of
tests/data/gpu under Nsight Systems and under the PyTorch profiler names the same kernels, read straight from the
files, and `compare` of the two runs shows no kernel that vanished and appeared again under another spelling."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import cli, cli_json
from receipts.analysis.explain import kernel_keys
from receipts.schema.kernel_names import canonical_kernel_name
from tests import kernel_corpus

GPU = Path(__file__).resolve().parent / "data" / "gpu"
REGISTRY = Path(__file__).resolve().parent / "data" / "registry.toml"

# (nsys, Kineto) spellings of one kernel, as the two FSDP2 runs wrote them
PAIRS = [
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
     "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
    ("at::native::<unnamed>::vectorized_layer_norm_kernel<c10::BFloat16, float, (bool)0>",
     "at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, false>"),
    ("at::native::<unnamed>::GammaBetaBackwardCUDAKernelTemplate<c10::BFloat16, float, (unsigned int)32, "
     "(unsigned int)32, (unsigned int)256, (bool)0, (bool)1, (bool)0>",
     "at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernelTemplate<c10::BFloat16, float, 32u, 32u, 256u, "
     "false, true, false>"),
    ("at::native::elementwise_kernel<(int)128, (int)4, void at::native::gpu_kernel_impl_nocast<"
     "at::native::CUDAFunctor_add<c10::BFloat16>>(at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>",
     "at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<"
     "c10::BFloat16> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<c10::BFloat16> const&)::{lambda(int)#1}>"),
    ("at::native::vectorized_elementwise_kernel<(int)8, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase &)"
     "::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>>",
     "at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)"
     "::{lambda(float)#1}, std::array<char*, 2ul> >"),
    ("at::native::reduce_kernel<(int)128, (int)4, at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t<"
     "c10::BFloat16, at::native::sum_functor<c10::BFloat16, float, c10::BFloat16>::operator ()(at::TensorIterator &)"
     "::[lambda(float, float) (instance 1)]>, unsigned int, c10::BFloat16, (int)4, (int)8>>",
     "at::native::reduce_kernel<128, 4, at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t<c10::BFloat16, "
     "at::native::sum_functor<c10::BFloat16, float, c10::BFloat16>::operator()(at::TensorIterator&)::{lambda(float, "
     "float)#1}>, unsigned int, c10::BFloat16, 4, 8> >"),
    ("at_cuda_detail::cub::detail::scan::DeviceCompactInitKernel<at_cuda_detail::cub::ScanTileState<unsigned long "
     "long, (bool)1>, long *>",
     "at_cuda_detail::cub::detail::scan::DeviceCompactInitKernel<at_cuda_detail::cub::ScanTileState<unsigned long "
     "long, true>, long*>"),
    ("void <unnamed>::elementwise_kernel_with_index<int, at::native::arange_cuda_out(const c10::Scalar &, "
     "const c10::Scalar &, const c10::Scalar &, at::Tensor &)::[lambda() (instance 1)]>",
     "void (anonymous namespace)::elementwise_kernel_with_index<int, at::native::arange_cuda_out(c10::Scalar const&, "
     "c10::Scalar const&, c10::Scalar const&, at::Tensor&)::{lambda()#1}>"),
]


@pytest.mark.parametrize("nsys, kineto", PAIRS)
def test_both_spellings_have_one_canonical_form(nsys, kineto):
    assert canonical_kernel_name(nsys) == canonical_kernel_name(kineto)


def test_the_form_is_stable_and_keeps_different_kernels_apart():
    names = list(kernel_corpus.read())
    assert all(canonical_kernel_name(canonical_kernel_name(n)) == canonical_kernel_name(n) for n in names)
    assert canonical_kernel_name("k<(int)-1, 16ll>(float *)") == "k<-1, 16>(float*)"
    assert canonical_kernel_name("fmha_sm80_128x128") == "fmha_sm80_128x128"   # digits inside a name stay
    assert canonical_kernel_name("k<(at::native::ADAM_MODE)1>") == "k<(at::native::ADAM_MODE)1>"  # enums stay
    # different template arguments stay different kernels
    assert canonical_kernel_name("k<(int)4>") != canonical_kernel_name("k<8>")


_PIECES = st.sampled_from(["<", ">", "(", ")", "const ", "void ", ", ", "(int)", "(bool)1", "<unnamed>", "T1", " ",
                           "*", "&", "4096ul", "operator ()", "::", "[lambda(int) (instance 1)]", "k", "\t"])


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(_PIECES, max_size=40).map("".join))
def test_any_name_gets_an_answer(name):
    # a name is user data (any profiler, any demangler): a spelling comes back, never an error or a hang, even for
    # `const const , <void &x`, where moving each `const` after its type gives the same text again
    assert isinstance(canonical_kernel_name(name), str)
    assert canonical_kernel_name("const const , <void &x") == "const const, <void&x"


def _nsys_names(path: Path) -> set[str]:
    """Kernel names of an nsys export, with sqlite3 alone."""
    with sqlite3.connect(":memory:") as con:
        con.deserialize(gzip.decompress(path.read_bytes()))
        return {r[0] for r in con.execute("SELECT DISTINCT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                                          "JOIN StringIds s ON s.id = k.demangledName")}


def _kineto_names(folder: Path) -> set[str]:
    """Kernel names of a folder of Kineto traces, with json alone."""
    return {e["name"] for f in folder.glob("*.json.gz") for e in json.loads(gzip.decompress(f.read_bytes()))
            ["traceEvents"] if e.get("cat") == "kernel"}


@pytest.fixture(scope="module")
def fsdp2_names() -> tuple[set[str], set[str]]:
    """The kernel names of the FSDP2 2-GPU runs: (nsys, Kineto)."""
    return _nsys_names(GPU / "fsdp2_2gpu_nsys.sqlite.gz"), _kineto_names(GPU / "fsdp2_2gpu_kineto" / "traces")


def test_the_same_workload_under_both_profilers_names_the_same_kernels(fsdp2_names):
    nsys, kineto = fsdp2_names
    assert len(nsys & kineto) < 10  # as written, most names differ
    keys = kernel_keys([nsys, kineto])
    on_nsys, on_kineto = {keys[n][0] for n in nsys}, {keys[n][0] for n in kineto}
    assert len(on_kineto) == len(kineto) == 50 and on_kineto <= on_nsys
    # the one kernel the Kineto traces do not hold: torch.randint of the synthetic batch (train_fsdp2.py), made once
    # before the profiler's schedule starts; nsys records the whole process
    (only,) = on_nsys - on_kineto
    assert "distribution_elementwise_grid_stride_kernel" in only and "random_from_to" in only


def test_both_spellings_of_each_kernel_fall_in_one_category(fsdp2_names):
    from receipts.schema.categories import load_category_rules

    rules = load_category_rules()
    runs = list(fsdp2_names)
    keys = kernel_keys(runs)
    by_key: dict[str, set[str]] = {}
    for n in runs[0] | runs[1]:
        by_key.setdefault(keys[n][0], set()).add(rules.classify(n))
    assert len(by_key) == 51 and all(len(c) == 1 for c in by_key.values())


def test_a_category_rule_written_from_one_profiler_matches_the_other(tmp_path):
    from receipts.schema.categories import load_category_rules

    rules_file = tmp_path / "rules.toml"
    rules_file.write_text('[[rules]]\ncategory = "attention"\n'
                          'pattern = "vectorized_layer_norm_kernel<c10::BFloat16, float, false>"\n')
    rules = load_category_rules(rules_file, cwd=tmp_path)
    nsys, kineto = PAIRS[1]
    assert rules.classify(nsys) == rules.classify(kineto) == "attention"
    assert load_category_rules(rules_file, cwd=tmp_path).classify_many([nsys, kineto]) == ["attention"] * 2


@pytest.mark.slow
def test_compare_of_an_nsys_run_and_a_kineto_run_names_no_kernel_twice(tmp_path):
    db = str(tmp_path / "r.duckdb")
    for args in ([str(GPU / "fsdp2_2gpu_nsys" / "run.log"), str(GPU / "fsdp2_2gpu_kineto" / "run.log")],
                 [str(GPU / "fsdp2_2gpu_nsys.sqlite.gz"), "--attach", "fsdp2_2gpu_nsys"],
                 [str(GPU / "fsdp2_2gpu_kineto" / "traces"), "--attach", "fsdp2_2gpu_kineto"]):
        result = cli(db, "--registry", str(REGISTRY), "ingest", *args)
        assert result.exit_code == 0, result.output
    code, out = cli_json(db, "--registry", str(REGISTRY), "compare", "fsdp2_2gpu_nsys", "fsdp2_2gpu_kineto")
    assert code == 0 and out["explain"]["profile_formats"] == ["kineto", "nsys"]
    kernels = [c for c in out["explain"]["components"] if c["level"] == "kernel"]
    assert len(kernels) >= 40
    assert [c["name"] for c in kernels if c["presence"]] == []
