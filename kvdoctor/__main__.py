"""`python -m kvdoctor` runs the kvdoctor command."""

import sys

from kvdoctor.cli import main

sys.exit(main())
