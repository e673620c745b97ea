"""`python -m mai.flows.cli` is `mai`."""

from mai.flows.cli import main

raise SystemExit(main())
