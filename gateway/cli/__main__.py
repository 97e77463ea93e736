"""``python -m gateway.cli``: the ``kgw`` command."""

import sys

from gateway.cli.main import main

sys.exit(main())
