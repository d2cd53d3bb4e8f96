"""`python -m kubellm.runtime ...` = the `kubellm` command."""
import sys

from kubellm.runtime.cli.main import main

sys.exit(main())
