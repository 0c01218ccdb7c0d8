# `python tools/prepare_data ARGS` (what bin/prepare-data runs): see prepare.py.
import sys

from prepare import main

sys.exit(main(sys.argv[1:]))
