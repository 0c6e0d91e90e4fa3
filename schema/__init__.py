"""The receipt model, identity canonicalisation, the registries, and the table definitions."""
