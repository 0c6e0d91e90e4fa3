"""A `receipts run` log around an unmodified third-party script.

The launcher writes a RECEIPT header and footer around whatever the child prints. When the child
is a script that knows nothing of receipts (nanochat, Megatron-LM, torchtitan, modded-nanogpt), the
log has RECEIPT header/footer records but no RECEIPT step records, and its step series is in the
child's own lines. Such a log is read twice: as the native format (identity, provenance, env,
software, topology, exit code) and, with the RECEIPT lines blanked out, as the child's format (the
steps). `merge` joins the two; it is pure, like the parsers it combines.

Line numbers are kept (RECEIPT lines are blanked, not removed), so every step's `line` still points
into the real run.log.
"""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from receipts.ingest.native import FORMAT as NATIVE, RECEIPT_LINE
from receipts.ingest.textlog import LogText
from receipts.schema.model import ParsedRun


def child_lines(log: LogText) -> LogText:
    """The log as the child printed it: RECEIPT records replaced by empty lines, numbering kept, so
    a header quoting the command (or an env value) can never be read as one of the child's lines."""
    blanked = (pl.DataFrame({"text": log.lines})
               .select(pl.when(pl.col("text").str.contains("RECEIPT {", literal=True)
                               & pl.col("text").str.contains(RECEIPT_LINE)).then(pl.lit(""))
                       .otherwise(pl.col("text")).alias("text")))["text"]
    return replace(log, lines=blanked)


def wants_child_steps(native: ParsedRun) -> bool:
    """A native parse with no step records: the steps, if any, are in the child's own format."""
    return native.source_format == NATIVE and native.steps.lazy().select(pl.len()).collect().item() == 0


def merge(native: ParsedRun, child: ParsedRun) -> ParsedRun:
    """One receipt from the launcher's records (`native`) and the child's lines (`child`).

    Steps and phases the child found are the step series; identity, provenance, env overlay, software
    and topology come from the header, which the user's flags wrote (the child's regime hint, e.g.
    Megatron's parallel degrees, only fills what the header left unset). Memory peaks come from
    whichever has them (the launcher's footer carries none; a rank's capture footer does). The GPU
    model and count are the launcher's nvidia-smi probe when it found a GPU, else the child's."""
    launcher_saw_gpus = native.gpu_model is not None
    ended = tuple(dict.fromkeys(r for r in (native.ended_early, child.ended_early) if r))
    version = "1" if not child.format_version else f"1+{child.format_version}"
    return ParsedRun(
        source_format=f"{NATIVE}+{child.source_format}",
        format_version=version,
        steps=child.steps,
        claim=child.claim.merged(native.claim),
        phases=native.phases + child.phases,
        memory=native.memory or child.memory,
        memory_geometry=native.memory_geometry,
        env=native.env or child.env,
        software=native.software or child.software,
        topology=native.topology or child.topology,
        provenance={**child.provenance, **native.provenance},
        features={**child.features, **native.features},
        tags=native.tags or child.tags,
        gpu_model=native.gpu_model if launcher_saw_gpus else child.gpu_model,
        gpu_count=native.gpu_count if launcher_saw_gpus else child.gpu_count,
        world_size=native.world_size or child.world_size,
        ended_early="; ".join(ended) or None,
        warnings=native.warnings + child.warnings,
        started_at=native.started_at or child.started_at,
    )
