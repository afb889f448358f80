#!/usr/bin/env bash
# CI: kctl with every declared dependency pinned at its floor (pyproject.toml's ">=X"),
# in a fresh virtual environment that sees no system packages, running the CLI tests:
# the profile tests (validate/plan/deploy through the real CLI in subprocesses), a
# simulated deploy end to end, the report rendered in-process (altair,
# vl-convert-python), and an ssh:// engine reached through paramiko (the ssh extra).
# A floor that fails here is a floor that lies.
#
#   bash scripts/ci-floors.sh            # a temporary venv, removed afterwards
#   FLOORS_VENV=/tmp/floors bash scripts/ci-floors.sh   # keep (and reuse) this one
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1

venv="${FLOORS_VENV:-}"
if [[ -z "$venv" ]]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  venv="$tmp/venv"
fi
[[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"

# name==floor for every runtime dependency, and for the test extras these tests import
floors="$(python3 - <<'PY'
import re, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
# what the CLI tests below import besides kctl's deps; pytest-xdist: addopts runs on workers
wanted = {"pytest", "pytest-xdist", "jsonschema", "paramiko"}
deps = project["dependencies"] + [
    d for d in project["optional-dependencies"]["test"]
    if re.split(r"[<>=!~ \[]", d, maxsplit=1)[0].lower() in wanted
]
for dep in deps:
    m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*>=\s*([0-9][^,;\s]*)\s*", dep)
    if m is None:
        raise SystemExit(f"pyproject.toml: {dep!r} has no '>=' floor to pin")
    print(f"{m.group(1)}=={m.group(2)}")
PY
)"
echo "== floors: $(echo $floors)"
"$venv/bin/pip" install -q $floors
"$venv/bin/pip" install -q --no-deps -e .
"$venv/bin/pip" check

echo "== the CLI tests at the floors"
"$venv/bin/python" -m pytest -q -p no:cacheprovider \
  tests/profile \
  "tests/integration/test_deploy_flows.py::test_first_deploy_measures_baseline_then_promotes" \
  "tests/integration/test_deploy_flows.py::test_regression_reverts_to_verified_baseline" \
  "tests/integration/test_startup.py" \
  tests/report/test_report_data.py \
  tests/fleet/test_engine_ssh.py
echo "== kctl deploy --help at the floors"
"$venv/bin/kctl" deploy --help >/dev/null
