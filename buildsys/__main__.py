"""``python -m buildsys``: run from a checkout, the builder uses that checkout's kernelpack."""

import sys

from buildsys import WHEELS_DIR

if (WHEELS_DIR / "kernelpack" / "__init__.py").is_file() and str(WHEELS_DIR) not in sys.path:
    sys.path.insert(0, str(WHEELS_DIR))

from buildsys.cli import main

sys.exit(main())
