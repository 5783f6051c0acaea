"""Offline stand-in for pip's get-pip.py, used by ansible-test's bootstrap.

ansible-test runs a cached get_pip_<version>.py as __main__ with pip-install
arguments. The real script carries an embedded pip; this one takes pip from
the interpreter's own ensurepip and then runs pip with the same arguments,
minus the get-pip-only switches. See shared/lab/HOST-NOTES.md.
"""
import subprocess
import sys

GET_PIP_ONLY = {"--no-setuptools", "--no-wheel"}


def main():
    args = [a for a in sys.argv[1:] if a not in GET_PIP_ONLY]
    subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"])
    if args:
        subprocess.check_call(
            [sys.executable, "-m", "pip", "install", "--upgrade", "--force-reinstall", *args]
        )


if __name__ == "__main__":
    main()
