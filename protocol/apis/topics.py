"""Enforcement for the topics API family (filled in by the authorization work)."""

SPECS = ()
