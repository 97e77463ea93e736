"""Enforcement for the transactions API family (filled in by the authorization work)."""

SPECS = ()
