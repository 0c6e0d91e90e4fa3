"""One spelling of a demangled kernel name, whichever profiler recorded it.

Nsight Systems and the PyTorch profiler (Kineto, through CUPTI) demangle the same symbol differently: nsys writes
template literals as casts and lambdas in EDG's style, Kineto as the GNU demangler (c++filt) does. Seen in the
FSDP2 runs of tests/data/gpu (nsys 2025.3, torch 2.11):

| nsys | Kineto |
| --- | --- |
| `elementwise_kernel<(int)128, (int)4, ...>` | `elementwise_kernel<128, 4, ...>` |
| `ncclDevKernelArgsStorage<(unsigned long)4096>`, `(unsigned int)32` | `ncclDevKernelArgsStorage<4096ul>`, `32u` |
| `(bool)0`, `(bool)1` | `false`, `true` |
| `at::native::<unnamed>::` | `at::native::(anonymous namespace)::` |
| `[lambda(float) (instance 1)]`, `operator ()()` | `{lambda(float)#1}`, `operator()()` |
| `const float *`, `char **`, `Copy<float>>` | `float const*`, `char**`, `Copy<float> >` |
| `void gpu_kernel_impl_nocast<F>(at::TensorIteratorBase &, const T1 &)` inside a template argument | `gpu_kernel_impl_nocast<F>(at::TensorIteratorBase&, F const&)` |

`canonical_kernel_name` maps both to one form: the GNU spelling without the optional spaces, integer literals
bare, and inside template arguments a function template's parameter list left out (EDG names those parameters
by their template parameters, `const T1 &`, GNU by the substituted types; the template arguments already say
which). The kernel's own parameter list stays: it tells overloads apart within a run (fbgemm has kernels that
differ only there). Where EDG writes it with placeholders too (`chunk_cat_cuda_kernel<float, c10::BFloat16>(T2 **,
T1 *, ...)`), the two spellings differ only in the list, and analysis.explain.kernel_keys matches them by the name
without it, as it matches every kernel whose name without arguments is one kernel's in each run.
"""

from __future__ import annotations

import re

_INT_TYPES = r"(?:unsigned |signed )?(?:char|short|int|long long|long)|unsigned"
_CAST_LITERAL = re.compile(rf"\((?:{_INT_TYPES})\)(-?\d+)\b")
_SUFFIX_LITERAL = re.compile(r"(?<![\w.])(-?\d+)(?:ull|ul|ll|lu|llu|u|l)\b", re.IGNORECASE)
_BOOL = re.compile(r"\(bool\)([01])\b")
_LAMBDA = re.compile(r"\[lambda\(([^()\[\]]*)\) \(instance (\d+)\)\]")
_SPACE_AROUND = re.compile(r"\s*([*&<>()\[\]{},])\s*")
_WORD_AFTER = re.compile(r"([>)])(?=[A-Za-z_])")  # `> const&`, `() const`: a word after a bracket keeps its space
_CONST_PREFIX = re.compile(r"(?:^|(?<=[<(])|(?<=, ))const ")


def canonical_kernel_name(name: str) -> str:
    """The profiler-independent spelling of a demangled kernel name (see the module docstring)."""
    text = " ".join(name.split()).removeprefix("void ")
    text = text.replace("<unnamed>", "(anonymous namespace)")
    text = _BOOL.sub(lambda m: "true" if m.group(1) == "1" else "false", text)
    text = _CAST_LITERAL.sub(r"\1", text)
    text = _SUFFIX_LITERAL.sub(r"\1", text)
    text = _LAMBDA.sub(r"{lambda(\1)#\2}", text)
    text = text.replace("operator ()", "operator()")
    text = _WORD_AFTER.sub(r"\1 ", _SPACE_AROUND.sub(r"\1", text).replace(",", ", "))
    text = _const_after(text)
    return _drop_signatures(text)


def _const_after(text: str) -> str:
    """`const T*` -> `T const*` (GNU puts the qualifier after the type it qualifies)."""
    while (m := _CONST_PREFIX.search(text)) is not None:
        start = m.end()
        depth, i = 0, start
        while i < len(text):
            ch = text[i]
            if ch == "<":
                depth += 1
            elif ch == ">":
                if depth == 0:
                    break
                depth -= 1
            elif depth == 0 and ch in ",()*&":
                break
            i += 1
        text = text[:m.start()] + text[start:i] + " const" + text[i:]
    return text


def _drop_signatures(text: str) -> str:
    """Inside template arguments: a function template's parameter list (`f<X>(params)::...` -> `f<X>::...`) and
    the return type `void ` EDG writes before its name."""
    out: list[str] = []
    depth, i, n = 0, 0, len(text)
    while i < n:
        ch = text[i]
        if depth and text.startswith("void ", i) and (text[i - 1] == "<" or text[i - 2:i] == ", "):
            i += len("void ")
            continue
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
            if depth and text[i + 1:i + 2] == "(":
                out.append(ch)
                i = _skip_parens(text, i + 1)
                continue
        out.append(ch)
        i += 1
    return "".join(out)


def _skip_parens(text: str, i: int) -> int:
    """Index just past the balanced (...) group starting at text[i]."""
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "(":
            depth += 1
        elif text[j] == ")":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)
