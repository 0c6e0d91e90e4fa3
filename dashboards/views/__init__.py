"""One module per dashboard view, each with render(data: Data)."""

if __name__.split(".")[0] != "receipts":  # a second copy under a bare name: see receipts/errors.py
    raise ImportError(f"import receipts.{__name__}, not {__name__}: the repository root is the package `receipts`")
