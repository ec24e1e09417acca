"""RL building blocks: the service router (`monarch.service`) and weight sync
(`monarch.weights`)."""
