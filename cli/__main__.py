"""`python -m mai.cli` is `mai`."""

from mai.cli import main

raise SystemExit(main())
