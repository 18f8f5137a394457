#!/usr/bin/env bash
# Run the whole test suite. pytest's exit code 5 ("no tests collected") is reported, not hidden.
set -u
python -m pytest -q "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests (exit 5)"
fi
exit "$rc"
