"""Streamlit dashboard over a receipts store, read-only: `receipts dashboard` or
`streamlit run dashboards/app.py -- --db PATH`. Views present; sql/ and analysis/ compute."""
