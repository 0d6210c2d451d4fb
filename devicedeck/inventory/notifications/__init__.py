"""Alerts from the change log and the outbox that carries them to webhook targets."""
