"""``python -m budgetmix.cli`` (and ``accelerate launch -m budgetmix.cli train ...``)."""

from budgetmix.cli import main

raise SystemExit(main())
