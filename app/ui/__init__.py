"""The operator dashboard: server-rendered pages with htmx for partial and live updates."""
