"""receipts: a warehouse for GPU training-run receipts.

Data flow: ingest/ (one parser per source format) -> schema/ (the receipt model, identity
rules, registries, tables) -> store/ -> sql/ -> analysis/ (compare, gate) -> cli/ and dashboards/.
"""

__version__ = "0.1.0"
