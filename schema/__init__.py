"""The receipt model, identity canonicalisation, the registries, and the table definitions."""

if __name__.split(".")[0] != "receipts":  # a second copy under a bare name: see receipts/errors.py
    raise ImportError(f"import receipts.{__name__}, not {__name__}: the repository root is the package `receipts`")
