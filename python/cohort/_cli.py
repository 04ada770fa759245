"""The `cohort` command of an installed package: the C program that pip
built into the package's folder, run in this process's place (its exit
status, signals and terminal are the program's own)."""
import os
import sys


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    exe = os.path.join(here, "cohort")
    if not os.access(exe, os.X_OK):
        sys.stderr.write(f"cohort: the command was not built into {here}; reinstall the package "
                         "with `pip install` from a clone of cohort\n")
        return 2
    os.execv(exe, ["cohort"] + sys.argv[1:])
    return 2  # not reached


if __name__ == "__main__":
    sys.exit(main())
