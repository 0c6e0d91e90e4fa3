"""Streamlit views over the store; read-only."""
