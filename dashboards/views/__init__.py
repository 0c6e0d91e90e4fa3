"""One module per dashboard view, each with render(data: Data)."""
