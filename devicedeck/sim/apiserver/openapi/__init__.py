"""OpenAPI v2 and v3 documents for the kinds the simulated API server serves, generated from
short descriptions written for it."""
