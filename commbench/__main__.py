"""`python -m commbench` and `torchrun ... -m commbench`."""

import sys

from commbench.cli import main

if __name__ == "__main__":
    sys.exit(main())
