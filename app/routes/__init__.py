"""REST routers, one per resource."""
