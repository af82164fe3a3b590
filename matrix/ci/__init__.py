"""CI plumbing beside the domain: the cells as other systems' pipelines, and the page in a real browser."""
