"""Stand-in for ``python3 -m sglang.launch_server --model-path M --host H --port P ...``: see ../openai_server.py."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
from openai_server import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main("sglang", sys.argv[1:]))
