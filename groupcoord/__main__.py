"""`python -m groupcoord`: the same as the `groupcoord` console script."""

import sys

from groupcoord.cli import main

sys.exit(main())
