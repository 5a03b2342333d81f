"""pagedviz's web layer: REST API and pages over the core engine. It knows nothing of how slots
are computed; it asks `core` and shapes the answers."""
