"""``python -m epp`` runs the command line."""

from epp.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
