"""The one DuckDB transaction helper (the store's writes, `db init`, migrations)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import duckdb


class _Transaction:
    def __init__(self, con) -> None:
        self.con, self.open = con, True

    def rollback(self) -> None:
        self.con.execute("ROLLBACK")
        self.open = False


@contextmanager
def transaction(con) -> Iterator[_Transaction]:
    """BEGIN ... COMMIT, or ROLLBACK on any exception (Ctrl-C included) and re-raise it. The one place this is
    written: a ROLLBACK that fails because the interrupt already ended the transaction must not replace the
    interrupt with 'cannot rollback - no transaction is active' (a batch then read Ctrl-C as one failed file)."""
    con.execute("BEGIN TRANSACTION")
    tx = _Transaction(con)
    try:
        yield tx
    except BaseException:
        if tx.open:
            try:
                con.execute("ROLLBACK")
            except duckdb.Error:
                pass  # already rolled back by the interruption: the original exception is the news
        raise
    if tx.open:
        con.execute("COMMIT")
