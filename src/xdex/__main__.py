"""`python -m xdex` runs the same command-line interface as `xdex`."""

from xdex.cli import main

if __name__ == "__main__":
    main()
