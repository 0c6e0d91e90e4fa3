"""Schema versions and migrations for both backends.

Each revision is a module here (`v000N_*.py`) with VERSION, DESCRIPTION and `upgrade(op)` written with
Alembic's operations API. We render those operations offline (Alembic's `as_sql` mode, PostgreSQL
dialect) into SQL statements and execute them ourselves, on a psycopg connection or a DuckDB one:

- DuckDB has no SQLAlchemy dialect among our dependencies (duckdb_engine is not one), so Alembic's
  online mode cannot drive it; offline rendering needs no dialect for the target, and DuckDB already
  reads the PostgreSQL dialect's DDL (schema/tables.py relies on the same fact).
- One version record for both: `schema_meta.schema_version`, which the stores already check when they
  open, instead of a second truth in an `alembic_version` table.

Fresh stores are created from schema/tables.py at SCHEMA_VERSION (as DuckDBStore does); revision 0001
is the first released schema, frozen, so an upgrade from it can be tested on both backends. Downgrades
are not offered: keep a copy (`receipts push` or the DuckDB file) before upgrading a shared store.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

from receipts.errors import RegistryError, StoreError, UnsupportedVersion
from receipts.schema.tables import SCHEMA_VERSION, ddl_statements
from receipts.store.migrations import (v0001_initial, v0002_lookup_indexes, v0003_identity_lifecycle,
                                       v0004_gpu_counts, v0005_stragglers, v0006_receipt_summaries,
                                       v0007_anatomy_kernels, v0008_duckdb_steps_without_art_index,
                                       v0009_receipt_components, v0010_memory_geometry, v0011_run_order,
                                       v0012_step_kernels, v0013_category_rules, v0014_lane_key,
                                       v0015_receipt_telemetry, v0016_kernel_shapes, v0017_gap_places,
                                       v0018_lane_key_index_only)
from receipts.store.urls import is_server_url

# pg_advisory_xact_lock key ('rcpt' in ASCII): serialises concurrent `init`/`upgrade`, which would otherwise race
# on CREATE TABLE IF NOT EXISTS.
PG_LOCK_KEY = 0x72637074


@dataclass(frozen=True)
class Revision:
    version: int
    description: str
    upgrade: Callable[[Any], None]  # upgrade(op), op being Alembic's Operations
    backends: tuple[str, ...] = ("duckdb", "postgresql")  # where its SQL runs; the others only stamp its version

    @classmethod
    def of(cls, position: int, module: ModuleType) -> Revision:
        """The revision a module holds, checked: its VERSION is its position in REVISIONS (1-based)."""
        def broken(reason: str) -> RegistryError:
            return RegistryError("schema revision", str(position), module.__name__, reason)

        if getattr(module, "VERSION", None) != position:
            raise broken(f"has VERSION {getattr(module, 'VERSION', None)}, expected {position}")
        if not isinstance(getattr(module, "DESCRIPTION", None), str) or not callable(getattr(module, "upgrade", None)):
            raise broken("needs a DESCRIPTION and an upgrade(op)")
        return cls(position, module.DESCRIPTION, module.upgrade, tuple(getattr(module, "BACKENDS", cls.backends)))


# In order; each module's VERSION is its position (1-based). Add new revisions at the end.
REVISIONS: tuple[Revision, ...] = tuple(Revision.of(position, module) for position, module in enumerate((
    v0001_initial, v0002_lookup_indexes, v0003_identity_lifecycle, v0004_gpu_counts, v0005_stragglers,
    v0006_receipt_summaries, v0007_anatomy_kernels, v0008_duckdb_steps_without_art_index, v0009_receipt_components,
    v0010_memory_geometry, v0011_run_order, v0012_step_kernels, v0013_category_rules, v0014_lane_key,
    v0015_receipt_telemetry, v0016_kernel_shapes, v0017_gap_places, v0018_lane_key_index_only), start=1))


@dataclass(frozen=True)
class SchemaStatus:
    backend: str                 # 'duckdb' | 'postgresql'
    url: str                     # never with a password
    schema_version: int | None   # None: an empty database (run `receipts db init`)
    code_version: int            # the version this build reads and writes
    head_version: int            # the newest revision this build can migrate to
    receipts: int | None

    @property
    def state(self) -> str:
        if self.schema_version is None:
            return "empty"
        if self.schema_version < self.code_version:
            return "needs upgrade"
        if self.schema_version > self.code_version:
            return "newer than this build"
        return "up to date"


def head_version() -> int:
    return len(REVISIONS)


class _Collector:
    """Alembic's offline output buffer: it writes each rendered statement in one call."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    def write(self, text: str) -> None:
        text = text.strip()
        if text:
            self.statements.append(text.removesuffix(";"))

    def flush(self) -> None:
        pass


def render(revision: Revision) -> list[str]:
    """The revision's SQL, rendered with the PostgreSQL dialect (which DuckDB accepts)."""
    # Imported here: alembic's package import costs over a second, and every CLI call opens a store.
    from alembic.migration import MigrationContext
    from alembic.operations import Operations

    collector = _Collector()
    context = MigrationContext.configure(dialect_name="postgresql",
                                         opts={"as_sql": True, "output_buffer": collector, "literal_binds": True})
    revision.upgrade(Operations(context))
    return collector.statements


def _statements(revision: Revision, target) -> list[str]:
    """The revision's SQL for this target: none where the revision names other backends (BACKENDS), whose
    version is still stamped, so both backends count revisions alike."""
    return render(revision) if target.backend in revision.backends else []


# ---- targets: a raw connection to a store, without the stores' own version checks ----------------
class DuckDBTarget:
    backend = "duckdb"

    def __init__(self, con, url: str):
        self.con, self.url = con, url

    @contextmanager
    def transaction(self) -> Iterator[None]:
        # One DuckDB file has one writer process at a time, so the transaction itself is the lock.
        from receipts.store.duckdb_tx import transaction

        with transaction(self.con):
            yield

    def execute(self, statement: str, params: list[Any] | None = None) -> list[tuple]:
        return self.con.execute(statement, params or []).fetchall()

    def tables(self) -> set[str]:
        return {r[0] for r in self.execute("SELECT table_name FROM information_schema.tables "
                                           "WHERE table_schema = current_schema()")}


class PostgresTarget:
    backend = "postgresql"

    def __init__(self, conn, url: str):
        self.conn, self.url = conn, url   # a psycopg connection in autocommit mode

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.conn.transaction():
            self.conn.execute("SELECT pg_advisory_xact_lock(%s)", [PG_LOCK_KEY])
            yield

    def execute(self, statement: str, params: list[Any] | None = None) -> list[tuple]:
        # Our own statements mark parameters with '?' (DuckDB's style); rendered DDL carries none, and
        # is sent without parameters so a '%' in it is not taken for a placeholder.
        cur = self.conn.execute(statement.replace("?", "%s"), params) if params else self.conn.execute(statement)
        return cur.fetchall() if cur.description else []

    def tables(self) -> set[str]:
        return {r[0] for r in self.execute("SELECT table_name FROM information_schema.tables "
                                           "WHERE table_schema = current_schema()")}


@contextmanager
def open_target(url: str, *, create: bool = False) -> Iterator[DuckDBTarget | PostgresTarget]:
    """A raw connection for `receipts db ...`: it must open stores of any version, even ones the
    stores themselves refuse."""
    url = str(url)
    if is_server_url(url):
        import psycopg

        from receipts.store.urls import libpq_dsn, redact_url

        try:
            conn = psycopg.connect(libpq_dsn(url), autocommit=True)
        except psycopg.OperationalError as exc:
            raise StoreError(redact_url(url), f"cannot connect: {str(exc).strip()}") from exc
        try:
            yield PostgresTarget(conn, redact_url(url))
        finally:
            conn.close()
        return
    from receipts.store.duckdb_lock import open_with_lock_wait

    if not create and not Path(url).exists():
        raise StoreError(url, "does not exist (create it with `receipts db init` or by ingesting a file)")
    con = open_with_lock_wait(url)  # another process's lock: wait, bounded, as every store open does
    try:
        yield DuckDBTarget(con, url)
    finally:
        con.close()


# ---- operations --------------------------------------------------------------------------------
def stored_version(target) -> int | None:
    """None for an empty database; refuses a database that holds something other than receipts."""
    tables = target.tables()
    if "schema_meta" not in tables:
        if tables:
            shown = ", ".join(sorted(tables))[:200]
            raise StoreError(target.url, f"holds other tables and no receipts schema_meta ({shown})")
        return None
    row = target.execute("SELECT value FROM schema_meta WHERE key = 'schema_version'")
    if not row:
        raise StoreError(target.url, "schema_meta has no schema_version row")
    return int(row[0][0])


def _stamp(target, version: int, *, fresh: bool) -> None:
    if fresh:
        target.execute("INSERT INTO schema_meta (key, value) VALUES ('schema_version', ?), ('created_by', 'receipts')",
                       [str(version)])
    else:
        target.execute("UPDATE schema_meta SET value = ? WHERE key = 'schema_version'", [str(version)])


def init(target, *, version: int = SCHEMA_VERSION) -> bool:
    """Create the schema in an empty database; False when one is already there (left unchanged).

    `version` below the current one builds that old schema from the frozen revisions (for tests of
    the upgrade path); the current version is built from schema/tables.py, like DuckDBStore does."""
    if not 1 <= version <= max(head_version(), SCHEMA_VERSION):
        raise UnsupportedVersion("schema", str(version), f"1 to {max(head_version(), SCHEMA_VERSION)}")
    with target.transaction():
        if stored_version(target) is not None:
            return False
        if version == SCHEMA_VERSION:
            for statement in ddl_statements(target.backend):
                target.execute(statement)
        else:
            for revision in REVISIONS[:version]:
                for statement in _statements(revision, target):
                    target.execute(statement)
        _stamp(target, version, fresh=True)
        return True


def upgrade(target, *, to: int = SCHEMA_VERSION) -> list[int]:
    """Apply each missing revision up to `to`, each in its own transaction. Returns the versions applied."""
    if to > head_version():
        raise UnsupportedVersion("migration target", str(to), f"up to {head_version()}")
    applied = []
    for revision in REVISIONS[:to]:
        with target.transaction():
            current = stored_version(target)
            if current is None:
                raise StoreError(target.url, "is empty: run `receipts db init` first")
            if current > to:
                raise UnsupportedVersion(f"store {target.url} schema", str(current), f"up to {to}")
            if revision.version <= current:
                continue
            for statement in _statements(revision, target):
                target.execute(statement)
            _stamp(target, revision.version, fresh=False)
            applied.append(revision.version)
    return applied


def ensure_schema(target) -> None:
    """What a PostgreSQL store does on open: refuse an empty database and any version other than the one this build
    reads, saying how to fix it. It never creates or migrates: that is the owner's `db init` / `db upgrade`."""
    current = stored_version(target)
    if current is None:
        raise StoreError(target.url, "has no receipts schema: its owner creates it once (`receipts db init` as "
                                     "the role that owns the database), then grants writers and readers their "
                                     "rights (docs/teams.md)")
    if current < SCHEMA_VERSION:
        raise StoreError(target.url, f"schema version {current} is older than this build's {SCHEMA_VERSION}: "
                                     f"its owner upgrades it (`receipts --db <url> db upgrade` as the role that owns "
                                     "the tables; then the writers' GRANT UPDATE again, docs/teams.md)")
    if current > SCHEMA_VERSION:
        raise UnsupportedVersion(f"store {target.url} schema", str(current), str(SCHEMA_VERSION))


def status(target) -> SchemaStatus:
    version = stored_version(target)
    count = target.execute("SELECT count(*) FROM receipts")[0][0] if version is not None else None
    return SchemaStatus(target.backend, target.url, version, SCHEMA_VERSION, head_version(), count)
