"""One module per source format. A parser reads a file and returns schema objects, or raises one
InputError naming the file and line. Parsers never touch the store; `sniff` decides which runs."""
