import sys

from ondevice.cli import main

sys.exit(main())
