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
_CAST = re.compile(rf"\((?:{_INT_TYPES})\)(?=-?\d)")                       # `(int)128` -> `128`
_SUFFIX_LITERAL = re.compile(r"(?<![\w.])(-?\d+)(?:ull|ul|ll|lu|llu|u|l)\b", re.IGNORECASE)  # `4096ul` -> `4096`
_LAMBDA = re.compile(r"\[lambda\(([^()\[\]]*)\) \(instance (\d+)\)\]")
_SPACE_BEFORE = re.compile(r"\s+(?=[*&<>()\[\]{},])")
_SPACE_AFTER = re.compile(r"(?<=[*&<>()\[\]{},])\s+")
_WORD_AFTER = re.compile(r"(?<=[>)])(?=[A-Za-z_])")  # `> const&`, `() const`: a word after a bracket keeps its space
_CONST_PREFIX = re.compile(r"(?:^|(?<=[<(])|(?<=, ))const ")
_SIGNATURE_TOKENS = re.compile(r"[<>]|(?<=<)void |(?<=, )void ")
_PARENS = re.compile(r"[()]")


def canonical_kernel_name(name: str) -> str:
    """The profiler-independent spelling of a demangled kernel name (see the module docstring)."""
    text = " ".join(name.split()).removeprefix("void ")
    text = text.replace("<unnamed>", "(anonymous namespace)").replace("(bool)0", "false").replace("(bool)1", "true")
    text = _SUFFIX_LITERAL.sub(_first_group, _CAST.sub("", text))
    if "[lambda(" in text:
        text = _LAMBDA.sub(lambda m: f"{{lambda({m[1]})#{m[2]}}}", text)
    text = _SPACE_AFTER.sub("", _SPACE_BEFORE.sub("", text.replace("operator ()", "operator()")))
    text = _WORD_AFTER.sub(" ", text.replace(",", ", "))
    if "const " in text:
        text = _const_after(text)
    return _drop_signatures(text)


def _first_group(m: re.Match[str]) -> str:
    return m[1]


def _const_after(text: str) -> str:
    """`const T*` -> `T const*` (GNU puts the qualifier after the type it qualifies), left to right."""
    pos = 0
    while (m := _CONST_PREFIX.search(text, pos)) is not None:
        start = i = m.end()
        depth = 0
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
        moved = text[start:i] + " const"
        text = text[:m.start()] + moved + text[i:]
        pos = m.start() + len(moved)
    return text


def _drop_signatures(text: str) -> str:
    """Inside template arguments: a function template's parameter list (`f<X>(params)::...` -> `f<X>::...`) and
    the return type `void ` EDG writes before its name."""
    if "<void " not in text and ", void " not in text and not _nested_call(text):
        return text  # most names: nothing to leave out (str.count runs in C; the token loop below does not)
    out: list[str] = []
    depth = last = 0
    for m in _SIGNATURE_TOKENS.finditer(text):
        if m.start() < last:
            continue  # inside a parameter list left out
        token = m.group()
        if token == "<":
            depth += 1
        elif token == ">":
            depth = max(depth - 1, 0)
            if depth and text.startswith("(", m.end()):
                out.append(text[last:m.end()])
                last = _skip_parens(text, m.end())
        elif depth:  # `void ` opening a template argument
            out.append(text[last:m.start()])
            last = m.end()
    out.append(text[last:])
    return "".join(out)


def _nested_call(text: str) -> bool:
    """Whether some `>(` closes a template-id inside template arguments."""
    i = text.find(">(")
    while i != -1:
        if text.count("<", 0, i) > text.count(">", 0, i + 1):
            return True
        i = text.find(">(", i + 2)
    return False


def _skip_parens(text: str, i: int) -> int:
    """Index just past the balanced (...) group starting at text[i]."""
    depth = 0
    for m in _PARENS.finditer(text, i):
        depth += 1 if m.group() == "(" else -1
        if depth == 0:
            return m.end()
    return len(text)
