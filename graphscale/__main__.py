"""``python -m graphscale`` = the ``graphscale`` command."""

import sys

from graphscale.cli import main

sys.exit(main())
