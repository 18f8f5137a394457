"""Self-contained interactive Plotly reports."""
