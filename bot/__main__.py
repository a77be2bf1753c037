"""`python -m bot` is the `baton` command."""

import sys

from bot.cli import main

sys.exit(main())
