"""One module per source format. A parser reads a file and returns schema objects, or raises one
InputError naming the file and line. Parsers never touch the store; `sniff` decides which runs."""

if __name__.split(".")[0] != "receipts":  # a second copy under a bare name: see receipts/errors.py
    raise ImportError(f"import receipts.{__name__}, not {__name__}: the repository root is the package `receipts`")
