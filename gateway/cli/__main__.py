"""``python -m gateway.cli``: the ``kgw`` command (workers are started this way too)."""

import sys

from gateway.cli.entry import main

sys.exit(main())
