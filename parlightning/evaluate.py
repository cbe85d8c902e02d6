# A thin entry module, written by tools/relayout.py.
"""`python -m parlightning.evaluate`: the entry point; the program is `parlightning.cli.evaluate`, and importing `parlightning.evaluate` gives that
module itself (the same object: its names, its patches, a callable `fit`)."""

import sys

from parlightning.cli import evaluate as _program

if __name__ == "__main__":
    _program.main()
else:
    sys.modules[__name__] = _program
