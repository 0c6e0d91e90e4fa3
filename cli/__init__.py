"""The `receipts` command line: thin commands that parse options, call the library, and render."""
