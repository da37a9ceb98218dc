"""``python -m sglang_kv5d.rules``: docs/rules.md, ``--explain ID``, ``--update-readme README.md``."""

import sys

from .docs import main

sys.exit(main())
