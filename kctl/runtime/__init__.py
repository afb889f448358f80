"""Runtimes: where serving processes run (local processes or docker containers)."""
