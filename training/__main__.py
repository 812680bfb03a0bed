"""``python -m budgetmix.training`` (and ``accelerate launch -m budgetmix.training``)."""

from budgetmix.training.cli import main

raise SystemExit(main())
