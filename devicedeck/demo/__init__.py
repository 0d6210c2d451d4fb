"""The one-command demo and the simulated cluster shared with docker compose."""
