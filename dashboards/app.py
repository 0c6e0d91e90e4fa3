"""receipts dashboard: `streamlit run dashboards/app.py -- --db PATH` or `receipts dashboard --db PATH`.

Read-only over the store. The chosen view and receipt live in the URL (?view=receipt&id=...), so every
page a reviewer looks at can be linked.
"""

from __future__ import annotations

import argparse
import sys

import streamlit as st

from receipts.dashboards.views import anatomy, compare, history, lanes, memory, receipt, stragglers
from receipts.dashboards.views._data import Data, seed_from_url
from receipts.errors import ReceiptsError
from receipts.store import default_url

VIEWS = {
    "lanes": ("Lanes", lanes.render),
    "receipt": ("Receipt", receipt.render),
    "anatomy": ("Anatomy", anatomy.render),
    "compare": ("Compare", compare.render),
    "history": ("Lane history", history.render),
    "stragglers": ("Stragglers", stragglers.render),
    "memory": ("Memory", memory.render),
}


def db_url(argv: list[str]) -> str:
    """--db after `--` on the streamlit command line, else RECEIPTS_DB, else ./receipts.duckdb."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--db")
    args, _ = parser.parse_known_args(argv)
    return args.db or default_url()


def main() -> None:
    st.set_page_config(page_title="receipts", layout="wide")
    names = list(VIEWS)
    wanted = st.query_params.get("view", "lanes")
    seed_from_url("view", "view", names)
    view = st.sidebar.radio("View", names, key="view", format_func=lambda v: VIEWS[v][0])
    if view != wanted:
        # a new view starts from its own defaults, not the previous view's picks
        st.query_params.clear()
    st.query_params["view"] = view
    url = db_url(sys.argv[1:])
    try:
        data = Data(url)
    except ReceiptsError as exc:
        st.error(f"Cannot open the store: {exc}")
        return
    try:
        st.sidebar.caption(f"store `{url}` · version {data.version} (read-only)")
        VIEWS[view][1](data)
    finally:
        data.close()


main()
