"""The controller: deploy, rollback, bench, plan, status. Decides what to do and drives the
runtime; the CLI only parses and renders."""
