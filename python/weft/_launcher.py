"""The ``weftrun`` command of an installed package: runs the weftrun launcher bundled with it
(docs/weftrun.md), e.g. ``weftrun -n 4 python train.py``."""

import os
import sys

from ._lib import launcher_path


def main():
    try:
        path = launcher_path()
    except OSError as exc:
        print(exc, file=sys.stderr)
        return 1
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
