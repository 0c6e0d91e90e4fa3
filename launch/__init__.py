"""`receipts run`'s engine: launch a training command with its provenance header written before the
child's first import, tee and redact its output, forward signals, write the footer, then ingest the
run directory into the store.

Apart from receipts.capture on purpose: capture runs *inside* training on the standard library and
never opens a store; the launcher runs *around* training and ends by ingesting (pipeline, store).
"""

