import sys

from loopcert.cli import main

sys.exit(main())
