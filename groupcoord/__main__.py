"""`python -m groupcoord`: the same as the `groupcoord` console script."""

import sys

from groupcoord.console import main

sys.exit(main())
