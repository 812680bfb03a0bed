#!/usr/bin/env bash
# Installs MLflow (3.x), the second observability backend of the tests/backends group
# (tests/backends/test_mlflow.py), into a virtualenv of its own (default .venv-mlflow):
# the server brings scikit-learn, scipy, pyarrow, SQLAlchemy and Flask, none of which
# budgetmix needs, so it runs beside the app as a user's backend does. It receives
# OTLP/HTTP at /v1/traces (with an x-mlflow-experiment-id header) and answers its REST
# API; the test starts it on a free 127.0.0.1 port with a sqlite store.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv-mlflow}"
MLFLOW_VERSION="3.17.2"
if [ -x "$VENV/bin/mlflow" ] && "$VENV/bin/python" -m pip show mlflow 2>/dev/null \
    | grep -qx "Version: $MLFLOW_VERSION"; then
  exit 0
fi
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "mlflow==$MLFLOW_VERSION"
echo "installed mlflow $MLFLOW_VERSION ($VENV)"
