"""`python -m kubellm.operator` = `kubellm operator` (works without the other subcommands)."""
import sys

from kubellm.operator.cli import main

sys.exit(main())
