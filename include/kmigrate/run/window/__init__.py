"""The cutover window run as one course: each of its steps (steps.py) over the run's request, clusters and manifest, in the course's order (kmigrate.run.cutover.course)."""
