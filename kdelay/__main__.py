"""`python -m kdelay`: the same command line as the `kdelay` script."""

import sys

from .tools.cli import main

sys.exit(main())
