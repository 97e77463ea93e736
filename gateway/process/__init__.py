"""The gateway process: the ``Gateway`` object, its listeners and workers, the admin
HTTP endpoint and metrics, the audit publisher, dynamic BROKER configs, the metadata
backend and the start-up checks."""
