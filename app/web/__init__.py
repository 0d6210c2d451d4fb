"""What the JSON API (app/api) and the dashboard (app/ui) share: who is calling, the request's
database session and clock, request limits, and how a domain error becomes a status.

Neither app/api nor app/ui is imported here, and they never import each other.
"""
