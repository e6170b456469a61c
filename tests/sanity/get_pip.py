# Stand-in for pypa's get-pip.py, which ansible-test downloads from a host this workplace cannot reach:
# ensurepip, then pip installs what ansible-test asked for, from the package index pip is set up for.
import subprocess
import sys

subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade", "--default-pip"])
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
if args:
    subprocess.check_call([sys.executable, "-m", "pip", "install", *args])
