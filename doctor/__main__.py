"""`python -m doctor` runs the kvdoctor command."""

import sys

from doctor.cli import main

sys.exit(main())
