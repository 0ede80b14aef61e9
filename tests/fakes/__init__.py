"""Fakes of the outside world for tests: a GitHub server and an agent CLI. Never used by sweep itself."""
