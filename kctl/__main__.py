import sys

from kctl.cli import main

sys.exit(main())
