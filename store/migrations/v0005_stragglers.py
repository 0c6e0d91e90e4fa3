"""0005: rank-skew attribution stored with each multi-rank anatomy.

anatomy_sources.stragglers_json: analysis/stragglers.py's report of that export (matching, per rank the
last-arrival share and waits, the named stragglers with impact and cause, per collective kind, and the
rank x step waits the dashboard draws). Null for single-rank profiles, and for exports attached before this
revision (attaching the same export again is a no-op by its sha256; ingest it into a fresh store to get one).
"""

from __future__ import annotations

import sqlalchemy as sa

VERSION = 5
DESCRIPTION = "anatomy_sources.stragglers_json: rank-skew attribution per export"


def upgrade(op) -> None:
    op.add_column("anatomy_sources", sa.Column("stragglers_json", sa.Text()))
