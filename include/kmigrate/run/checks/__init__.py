"""Before a run writes or stops anything: what it was asked (request, selection), whether it may (rights), what the clusters are (versions), and the preflight that asks them all."""
