# The native Megatron line scanner (ingest/_megatron_lines.c); its contract is in ingest/megatron_scan.py.

def scan(block: bytes, first_line: int, last_as_text: bool, /) -> tuple[
    int, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, bytes, int, bytes, bytes]: ...
