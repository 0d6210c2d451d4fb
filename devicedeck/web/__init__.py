"""What the JSON API (api) and the dashboard (ui) share: who is calling, the request's
database session and clock, request limits, and how a domain error becomes a status.

Neither devicedeck/api nor devicedeck/ui is imported here, and they never import each other.
"""
