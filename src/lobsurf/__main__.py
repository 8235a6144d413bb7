"""``python -m lobsurf``: the ``lobsurf`` console command (torchrun ... -m lobsurf train)."""

import sys

from lobsurf.cli import main

sys.exit(main())
