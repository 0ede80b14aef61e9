"""Whether a task's tests discriminate: mechanical mutants and probes (docs/tasks.md)."""
