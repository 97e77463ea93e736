"""Enforcement for the admin API family (filled in by the authorization work)."""

SPECS = ()
