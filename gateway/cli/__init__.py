"""The ``kgw`` command: ``main`` parses the command line and runs a subcommand; the tools
(``kgw acls``, ``kgw users``, ``kgw metadata``, ``kgw demo``) live beside it."""
