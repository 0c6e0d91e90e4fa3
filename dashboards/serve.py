"""Start Streamlit on the dashboard with its modules already imported: `python -m receipts.dashboards.serve`.

`streamlit run` imports an app's modules inside the first visitor's first script run, so the first page
after a server start paid for altair, polars, duckdb, numpy and the views (over a second on a small box,
most of the cold first paint). Streamlit runs every script in this same process, so importing them here,
before its CLI opens the port, moves that cost to server start: /_stcore/health answers once they are in.
Arguments are those of `streamlit run`.
"""

from __future__ import annotations

import importlib
import logging
import sys

# What app.py imports, and what its cached functions import lazily (the receipt, anatomy, compare and
# history views): the first visit to any view should not be the one that loads the analysis modules.
PRELOAD = (
    "receipts.dashboards.views",
    "receipts.dashboards.views._data",
    "receipts.dashboards.views.lanes",
    "receipts.dashboards.views.receipt",
    "receipts.dashboards.views.anatomy",
    "receipts.dashboards.views.compare",
    "receipts.dashboards.views.history",
    "receipts.analysis.report",
    "receipts.analysis.anatomy",
    "receipts.analysis.compare",
    "receipts.analysis.record",
    "receipts.analysis.drilldown",
    "receipts.dashboards.views.step_drill",
    "receipts.analysis.lanes",
    "receipts.store.duckdb_store",
)


def main(argv: list[str]) -> None:
    # Each @st.cache_data defined before the server runs says "No runtime found" (a dozen lines at every start);
    # the runtime is there by the time any is called. (Streamlit sets its loggers' level as it creates them:
    # the module first, then the level.)
    importlib.import_module("streamlit.runtime.caching.cache_data_api")
    logging.getLogger("streamlit.runtime.caching.cache_data_api").setLevel(logging.ERROR)
    for name in PRELOAD:
        importlib.import_module(name)
    from streamlit.web import cli

    sys.argv = ["streamlit", "run", *argv]
    cli.main(prog_name="streamlit")


if __name__ == "__main__":
    main(sys.argv[1:])
